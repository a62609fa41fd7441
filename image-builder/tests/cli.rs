//! `foothold-build`'s command-line conventions on the real binary: bash completion in a bash that sourced the
//! script, and man pages `man` renders.

use std::path::Path;

#[path = "../../names/tests/support/cli.rs"]
mod cli_support;
use cli_support::{bash_complete, man_page};

fn builder() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_foothold-build"))
}

#[test]
fn bash_completes_subcommands_and_flags() {
    assert_eq!(
        bash_complete(builder(), &["foothold-build", "bui"]),
        ["build"]
    );
    assert_eq!(
        bash_complete(builder(), &["foothold-build", "build", "--off"]),
        ["--offline"]
    );
}

#[test]
fn man_pages_render() {
    let dir = tempfile::tempdir().unwrap();
    let text = man_page(builder(), dir.path(), "foothold-build-build.1");
    for want in ["--offline", "--bundle", "FOOTHOLD_CACHE"] {
        assert!(text.contains(want), "{want}:\n{text}");
    }
}
