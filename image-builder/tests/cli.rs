//! `foothold-build`'s command-line conventions on the real binary: bash completion in a bash that sourced the
//! script, and man pages `man` renders.

use std::path::Path;
use std::process::Command;

fn builder() -> &'static str {
    env!("CARGO_BIN_EXE_foothold-build")
}

#[test]
fn bash_completes_subcommands_and_flags() {
    let complete = |words: &str, cword: usize| {
        let script = format!(
            "source <('{}' completion bash) || exit 9\nCOMP_WORDS=({words})\nCOMP_CWORD={cword}\n\
             COMP_LINE=\"${{COMP_WORDS[*]}}\"\nCOMP_POINT=${{#COMP_LINE}}\n\
             f=$(complete -p foothold-build | sed -n 's/.* -F \\([^ ]*\\) .*/\\1/p')\n\
             \"$f\" foothold-build \"${{COMP_WORDS[COMP_CWORD]}}\" \"${{COMP_WORDS[COMP_CWORD-1]}}\"\n\
             printf '%s\\n' \"${{COMPREPLY[@]}}\"",
            builder()
        );
        let out = Command::new("bash")
            .args(["--norc", "--noprofile", "-c", &script])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert_eq!(complete("foothold-build bui", 1), "build\n");
    assert_eq!(complete("foothold-build build --off", 2), "--offline\n");
}

#[test]
fn man_pages_render() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(builder())
        .arg("man")
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let build = dir.path().join("foothold-build-build.1");
    let listed = String::from_utf8_lossy(&out.stdout);
    assert!(listed.lines().any(|l| Path::new(l) == build), "{listed}");
    let page = Command::new("man")
        .arg("-l")
        .arg(&build)
        .env("MANWIDTH", "200")
        .output()
        .unwrap();
    assert!(
        page.status.success(),
        "{}",
        String::from_utf8_lossy(&page.stderr)
    );
    let text = String::from_utf8_lossy(&page.stdout);
    for want in ["--offline", "--bundle", "FOOTHOLD_CACHE"] {
        assert!(text.contains(want), "{want}:\n{text}");
    }
}
