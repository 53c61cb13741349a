//! Answers: status with a one-line reason in the body, and storage errors as WebDAV statuses.

use ferry_storage::StorageError;
use http::{header, Response, StatusCode};

use crate::body::Body;

/// A response.
pub(crate) type Reply = Response<Body>;

/// `status` with `reason` as a one-line text body.
pub(crate) fn status(status: StatusCode, reason: impl std::fmt::Display) -> Reply {
    let mut r = Response::new(Body::text(format!("{reason}\n")));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

/// An empty answer.
pub(crate) fn empty(status: StatusCode) -> Reply {
    let mut r = Response::new(Body::Empty);
    *r.status_mut() = status;
    r
}

/// The status a storage error means over HTTP.
pub(crate) fn storage_status(e: &StorageError) -> StatusCode {
    match e {
        StorageError::NotFound(_) => StatusCode::NOT_FOUND,
        StorageError::PermissionDenied(_) | StorageError::OutsideRoot(_) => StatusCode::FORBIDDEN,
        StorageError::AlreadyExists(_) => StatusCode::METHOD_NOT_ALLOWED,
        StorageError::NotADirectory(_) => StatusCode::CONFLICT,
        StorageError::IsADirectory(_) => StatusCode::METHOD_NOT_ALLOWED,
        StorageError::NotEmpty(_) => StatusCode::CONFLICT,
        StorageError::NoSpace(_) => StatusCode::INSUFFICIENT_STORAGE,
        StorageError::Invalid(_) | StorageError::UnsupportedAlgorithm(_) => StatusCode::BAD_REQUEST,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// A storage error as an answer.
pub(crate) fn storage(e: &StorageError) -> Reply {
    status(storage_status(e), e)
}

/// Runs blocking storage work off the runtime's threads.
pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, StorageError> + Send + 'static,
) -> Result<T, StorageError> {
    tokio::task::spawn_blocking(f).await.unwrap_or_else(|e| {
        Err(StorageError::Io {
            path: "storage task".into(),
            source: std::io::Error::other(e.to_string()),
        })
    })
}
