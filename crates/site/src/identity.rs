//! Who a session's file operations run as: on a root server, its account's identity thread.

/// `storage` as seen by `account`: on a root server its file operations then run on that
/// account's identity thread (`ferry_storage::identity`); without an account, or where the
/// process cannot switch users, `storage` itself.
/// A root server refuses a session that would work as root (no account, or one with uid 0)
/// unless `allow_root`.
pub async fn storage_as(
    storage: std::sync::Arc<dyn ferry_storage::Storage>,
    account: Option<String>,
    allow_root: bool,
) -> Result<std::sync::Arc<dyn ferry_storage::Storage>, ferry_storage::StorageError> {
    if !ferry_storage::Identity::can_switch() {
        return Ok(storage);
    }
    let as_root = || {
        ferry_storage::StorageError::PermissionDenied(
            "sessions do not work as root on this server (allow-root-sessions is off)".into(),
        )
    };
    let Some(account) = account else {
        return if allow_root {
            Ok(storage)
        } else {
            Err(as_root())
        };
    };
    tokio::task::spawn_blocking(move || {
        let id = ferry_storage::Identity::lookup(&account)?;
        if id.uid == 0 {
            return if allow_root {
                Ok(storage)
            } else {
                Err(as_root())
            };
        }
        let s: std::sync::Arc<dyn ferry_storage::Storage> =
            std::sync::Arc::new(ferry_storage::AsUser::new(storage, id)?);
        Ok(s)
    })
    .await
    .map_err(|e| ferry_storage::StorageError::Io {
        path: "identity lookup".into(),
        source: std::io::Error::other(e.to_string()),
    })?
}
