//! What the two binaries' tests of their command-line conventions share (included by `#[path]` into
//! `agent/tests/http/cli.rs` and `image-builder/tests/cli.rs`): driving bash's completion as bash does,
//! rendering a man page with `man`, and checking the generated command reference in `docs/reference/`.

use std::path::Path;
use std::process::Command;

/// `cmd`'s output, once it exited 0 (else its stderr is the failure).
fn succeeded(cmd: &mut Command) -> std::process::Output {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// What bash completes for `words` of the command `bin` (the last word the one being completed), in a bash
/// that sourced `bin completion bash`: the function `complete -p` names, called as bash calls it.
pub fn bash_complete(bin: &Path, words: &[&str]) -> Vec<String> {
    let name = bin.file_name().unwrap().to_string_lossy();
    let quoted: Vec<String> = words.iter().map(|w| format!("'{w}'")).collect();
    let script = format!(
        "source <('{}' completion bash) || exit 9\n\
         COMP_WORDS=({})\nCOMP_CWORD={}\nCOMP_LINE=\"${{COMP_WORDS[*]}}\"\nCOMP_POINT=${{#COMP_LINE}}\n\
         f=$(complete -p {name} | sed -n 's/.* -F \\([^ ]*\\) .*/\\1/p')\n\
         \"$f\" {name} \"${{COMP_WORDS[COMP_CWORD]}}\" \"${{COMP_WORDS[COMP_CWORD-1]}}\"\n\
         printf '%s\\n' \"${{COMPREPLY[@]}}\"",
        bin.display(),
        quoted.join(" "),
        words.len() - 1,
    );
    let out = succeeded(Command::new("bash").args(["--norc", "--noprofile", "-c", &script]));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Runs `bin man DIR`, checks it listed `page` among what it wrote, and returns what `man -l` renders of it.
pub fn man_page(bin: &Path, dir: &Path, page: &str) -> String {
    let out = succeeded(Command::new(bin).arg("man").arg(dir));
    let listed = String::from_utf8_lossy(&out.stdout);
    let path = dir.join(page);
    assert!(
        listed.lines().any(|l| Path::new(l) == path),
        "{page}: {listed}"
    );
    let text = succeeded(
        Command::new("man")
            .arg("-l")
            .arg(&path)
            .env("MANWIDTH", "200"),
    );
    String::from_utf8_lossy(&text.stdout).into_owned()
}

/// Checks that every page `bin man --markdown` writes now is the same in `docs/reference/`, and that
/// `<name>.md` has `wants`.
pub fn reference_is_current(bin: &Path, wants: &[&str]) {
    let name = bin.file_name().unwrap().to_string_lossy().into_owned();
    let dir = tempfile::tempdir().unwrap();
    let out = succeeded(
        Command::new(bin)
            .args(["man", "--markdown"])
            .arg(dir.path()),
    );
    let docs = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("docs/reference");
    let written = String::from_utf8_lossy(&out.stdout).into_owned();
    for page in written.lines().map(Path::new) {
        let file = page.file_name().unwrap();
        let generated = std::fs::read_to_string(page).unwrap();
        assert!(
            std::fs::read_to_string(docs.join(file)).unwrap_or_default() == generated,
            "{} differs from the binary's: run `{name} man --markdown docs/reference`",
            docs.join(file).display()
        );
    }
    let generated = std::fs::read_to_string(dir.path().join(format!("{name}.md"))).unwrap();
    for want in wants {
        assert!(generated.contains(want), "{want}");
    }
}
