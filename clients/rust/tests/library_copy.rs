//! The crate ships a copy of the Functions library (`cargo package` cannot reach outside
//! the crate): it must be byte for byte the repository's one source, lua/slidingwindow.lua.

use std::path::Path;

#[test]
fn bundled_library_is_byte_identical_to_lua_slidingwindow_lua() {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../lua/slidingwindow.lua");
    let original = std::fs::read(&source).unwrap_or_else(|e| panic!("{}: {e}", source.display()));
    let bundled = slidingwindow_client::library::CODE.as_bytes();
    assert!(
        bundled == original.as_slice(),
        "clients/rust/slidingwindow.lua differs from lua/slidingwindow.lua: \
         cp lua/slidingwindow.lua clients/rust/slidingwindow.lua"
    );
}

#[test]
fn body_sha_and_version() {
    use slidingwindow_client::library;
    assert!(library::CODE.starts_with("#!lua name=slidingwindow\n"));
    assert!(!library::body().starts_with("#!lua"));
    assert_eq!(library::sha().len(), 40);
    assert!(!library::version_parts(library::version()).is_empty());
    assert!(library::is_older("0.0.1") && library::is_older("garbage"));
    assert!(!library::is_older("999.0.0"));
}

#[test]
fn acl_lines_are_the_readmes() {
    use slidingwindow_client::permissions::{LIBRARY_LINE, LIBRARY_LINE_62, OPERATOR_LINE};
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md"))
            .unwrap();
    let block = readme
        .split("<!-- library-acl-lines")
        .nth(1)
        .and_then(|r| r.split("<!-- /library-acl-lines -->").next())
        .expect("README.md's library-acl-lines block");
    let lines: Vec<&str> = block
        .lines()
        .filter(|l| l.starts_with("ACL SETUSER"))
        .collect();
    assert_eq!(lines, [LIBRARY_LINE, LIBRARY_LINE_62, OPERATOR_LINE]);
}
