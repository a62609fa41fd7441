//! The conventions both command lines follow: a `completion SHELL` subcommand printing the shell's completion
//! script, a `man DIR` subcommand writing a man page for the command and each subcommand, and `-o text|json|yaml`
//! on a command that reports something (the report on standard output, logs on standard error).

use clap::Command;

/// The shells `completion` writes for.
pub type Shell = clap_complete::Shell;

/// How a command prints its report.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    /// Lines for people.
    #[default]
    Text,
    /// One JSON document, for programs (`jq`).
    Json,
    /// The same fields as YAML.
    Yaml,
}

/// `-o`/`--output` of a command that reports something.
#[derive(clap::Args, Clone, Copy, Debug, Default)]
pub struct OutputArg {
    /// How to print the report: text, or json or yaml (the same fields) for programs.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Output::Text)]
    pub output: Output,
}

impl OutputArg {
    /// Writes `report` to `out` as asked: `text` writes the text form, JSON and YAML are `report`'s fields.
    pub fn write<T: serde::Serialize>(
        self,
        out: &mut dyn std::io::Write,
        report: &T,
        text: impl FnOnce(&mut dyn std::io::Write) -> std::io::Result<()>,
    ) -> std::io::Result<()> {
        match self.output {
            Output::Text => text(out),
            Output::Json => {
                serde_json::to_writer_pretty(&mut *out, report).map_err(std::io::Error::other)?;
                writeln!(out)
            }
            Output::Yaml => {
                let yaml = serde_saphyr::to_string(report).map_err(std::io::Error::other)?;
                out.write_all(yaml.as_bytes())
            }
        }
    }
}

/// Writes `cmd`'s completion script for `shell` to `out`.
pub fn completion(mut cmd: Command, shell: Shell, out: &mut dyn std::io::Write) {
    let name = cmd.get_name().to_owned();
    if shell != Shell::Bash {
        clap_complete::generate(shell, &mut cmd, name, out);
        return;
    }
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut cmd, name.clone(), &mut script);
    let script = String::from_utf8_lossy(&script);
    let _ = out.write_all(bash_state_names(&script, &name).as_bytes());
}

/// clap_complete's bash script (4.6, clap-rs/clap#6421) names a subcommand's state two ways when the command's
/// name has a `-`: its loop `foothold__agent__subcmd__serve`, its case arms `foothold__subcmd__agent__subcmd__serve`,
/// so no arm matches and nothing past the first word completes. The arms are spelled as the loop spells them.
fn bash_state_names(script: &str, name: &str) -> String {
    let sep = "__subcmd__";
    let arms = format!("{}{sep}", name.replace('-', sep));
    let state = format!("{}{sep}", name.replace('-', "__"));
    script.replace(&arms, &state)
}

/// The man pages of `cmd` and of each of its subcommands, nested ones too (`NAME-SUB-SUB.1`), as (file name,
/// page) in file-name order. The built-in `help` subcommand has none.
pub fn man_pages(cmd: Command) -> std::io::Result<Vec<(String, Vec<u8>)>> {
    let mut pages = Vec::new();
    let mut todo = vec![(cmd.get_name().to_owned(), cmd)];
    while let Some((name, cmd)) = todo.pop() {
        let mut cmd = cmd.name(name.clone()).display_name(name.clone());
        cmd.build();
        for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
            todo.push((format!("{name}-{}", sub.get_name()), sub.clone()));
        }
        let mut page = Vec::new();
        clap_mangen::Man::new(cmd).render(&mut page)?;
        pages.push((format!("{name}.1"), page));
    }
    pages.sort();
    Ok(pages)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool() -> Command {
        Command::new("my-tool")
            .version("1.0")
            .subcommand(
                Command::new("serve")
                    .about("Serve")
                    .arg(clap::Arg::new("max-uploads").long("max-uploads"))
                    .subcommand(Command::new("now")),
            )
            .subcommand(Command::new("fsck"))
    }

    #[test]
    fn a_page_per_command_nested_ones_too() {
        let pages = man_pages(tool()).unwrap();
        let names: Vec<&str> = pages.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "my-tool-fsck.1",
                "my-tool-serve-now.1",
                "my-tool-serve.1",
                "my-tool.1"
            ]
        );
        let serve = String::from_utf8(pages[2].1.clone()).unwrap();
        assert!(serve.contains(".TH my-tool-serve 1"), "{serve}");
        assert!(serve.contains("max\\-uploads"), "{serve}");
    }

    #[test]
    fn bash_completion_s_states_have_one_spelling() {
        let mut out = Vec::new();
        completion(tool(), Shell::Bash, &mut out);
        let script = String::from_utf8(out).unwrap();
        assert!(script.contains("complete -F _my__tool"), "{script}");
        // The loop's state for `serve now`, and an arm for it.
        assert!(
            script.contains("cmd=\"my__tool__subcmd__serve__subcmd__now\""),
            "{script}"
        );
        assert!(
            script.contains("\n        my__tool__subcmd__serve__subcmd__now)"),
            "{script}"
        );
        assert!(!script.contains("my__subcmd__tool"), "{script}");
    }
}
