use proptest::prelude::*;

use super::*;

fn grants(scope: &str, profile: Profile, base: &str) -> Grants {
    let scopes: Vec<String> = scope.split_whitespace().map(str::to_string).collect();
    Grants::parse(&scopes, profile, base).unwrap()
}

#[test]
fn a_trailing_slash_names_a_directory() {
    let g = grants("storage.read:/foo/bar/", Profile::Wlcg, "/");
    assert!(
        !g.allow(Operation::Read, "/foo/bar"),
        "not a file of its name"
    );
    assert!(g.allow(Operation::List, "/foo/bar"));
    assert!(g.allow(Operation::Read, "/foo/bar/x"));
}

#[test]
fn writers_may_make_the_leading_directories_and_readers_only_look_at_them() {
    let w = grants("storage.create:/foo/bar", Profile::Wlcg, "/");
    assert!(w.allow(Operation::Mkdir, "/foo"));
    assert!(
        !w.allow(Operation::Create, "/foo"),
        "a file /foo is not granted"
    );
    assert!(!w.allow(Operation::Create, "/foo/bargain"));
    let r = grants("storage.read:/foo/bar", Profile::Wlcg, "/");
    assert!(r.allow(Operation::Stat, "/foo"));
    assert!(!r.allow(Operation::Mkdir, "/foo"));
}

#[test]
fn scitokens_paths_default_to_the_root_and_write_creates_and_modifies() {
    let g = grants("read write:/out queue", Profile::SciTokens, "/vo");
    assert!(g.allow(Operation::Read, "/vo/any"));
    assert!(g.allow(Operation::Delete, "/vo/out/f"));
    assert!(!g.allow(Operation::Delete, "/vo/in/f"));
    assert!(!g.allow(Operation::Read, "/other"));
}

#[test]
fn unknown_and_compute_scopes_grant_nothing() {
    let g = grants(
        "openid offline_access compute.read storage.frobnicate:/",
        Profile::Wlcg,
        "/",
    );
    assert!(g.is_empty());
}

#[test]
fn escaped_scope_paths_are_decoded_once() {
    let g = grants("storage.read:/a%20b", Profile::Wlcg, "/");
    assert!(g.allow(Operation::Read, "/a b/c"));
    for bad in [
        "storage.read:/a%252Fb",
        "storage.read:/a%zz",
        "storage.read:a",
        "storage.read:/a\\b",
    ] {
        assert!(
            Grants::parse(&[bad.to_string()], Profile::Wlcg, "/").is_err(),
            "{bad}"
        );
    }
}

fn segment() -> impl Strategy<Value = String> {
    "[a-z]{1,4}"
}

proptest! {
    #[test]
    fn normalising_twice_changes_nothing(parts in proptest::collection::vec("[a-z.]{0,3}", 0..6)) {
        let path = format!("/{}", parts.join("/"));
        if let Some(once) = normalize(&path) {
            prop_assert_eq!(normalize(&once), Some(once.clone()));
            prop_assert!(!once.split('/').any(|s| s == ".." || s == "."));
        }
    }

    #[test]
    fn a_grant_covers_its_path_and_below_and_no_sibling_sharing_its_prefix(
        top in proptest::collection::vec(segment(), 1..4),
        below in proptest::collection::vec(segment(), 0..3),
        tail in "[a-z0-9]{1,3}",
    ) {
        let path = format!("/{}", top.join("/"));
        let g = grants(&format!("storage.read:{path}"), Profile::Wlcg, "/");
        let inside = if below.is_empty() { path.clone() } else { format!("{path}/{}", below.join("/")) };
        prop_assert!(g.allow(Operation::Read, &inside));
        let longer = format!("{path}{tail}");
        prop_assert!(!g.allow(Operation::Read, &longer));
        // A sibling reached through `..` (its name has a digit, which no granted name has).
        let sibling = format!("{path}/../0{tail}");
        prop_assert!(!g.allow(Operation::Read, &sibling));
    }
}
