//! What the two binaries' tests of their command-line conventions share (included by `#[path]` into
//! `agent/tests/http/cli.rs` and `image-builder/tests/cli.rs`): driving bash's completion as bash does, and
//! rendering a man page with `man`.

use std::path::Path;
use std::process::Command;

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
    let out = Command::new("bash")
        .args(["--norc", "--noprofile", "-c", &script])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Runs `bin man DIR`, checks it listed `page` among what it wrote, and returns what `man -l` renders of it.
pub fn man_page(bin: &Path, dir: &Path, page: &str) -> String {
    let out = Command::new(bin).arg("man").arg(dir).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listed = String::from_utf8_lossy(&out.stdout);
    let path = dir.join(page);
    assert!(
        listed.lines().any(|l| Path::new(l) == path),
        "{page}: {listed}"
    );
    let text = Command::new("man")
        .arg("-l")
        .arg(&path)
        .env("MANWIDTH", "200")
        .output()
        .unwrap();
    assert!(
        text.status.success(),
        "{}",
        String::from_utf8_lossy(&text.stderr)
    );
    String::from_utf8_lossy(&text.stdout).into_owned()
}
