//! Where a long-running command's flags come from besides its command line: each flag is also an environment
//! variable (`FOOTHOLD_` and its name in capitals, `-` as `_`: `--max-uploads` is `FOOTHOLD_MAX_UPLOADS`) and a
//! key of a YAML configuration file (`max-uploads: 64`). A flag on the command line wins over the environment,
//! which wins over the file, which wins over the built-in default; clap does the choosing, as the file's values
//! become the flags' defaults.
//!
//! Also where `man DIR` writes (the pages and the completion scripts are `foothold_names::cli`'s, for both
//! binaries), and how every command logs (`--log-format`).

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use clap::{Arg, ArgAction, Command};

/// The environment variable of a flag: `FOOTHOLD_` and its long name in capitals, `-` as `_`.
pub fn env_name(long: &str) -> String {
    format!("FOOTHOLD_{}", long.to_ascii_uppercase().replace('-', "_"))
}

/// Gives every flag of `cmd` that has a long name and no environment variable of its own the one `env_name`
/// makes. Help and version are left alone.
pub fn with_env(cmd: Command) -> Command {
    cmd.mut_args(|a| match a.get_long() {
        Some(long) if a.get_env().is_none() && takes_setting(&a) => {
            let name = env_name(long);
            a.env(name)
        }
        _ => a,
    })
}

fn takes_setting(a: &Arg) -> bool {
    !matches!(
        a.get_action(),
        ArgAction::Help | ArgAction::HelpShort | ArgAction::HelpLong | ArgAction::Version
    )
}

/// The subcommand `args` name and its configuration file, if that subcommand has a `config` flag: the file
/// the flag or its variable names (which must exist), else `default` (read if it exists). Read before the rest
/// of the command line is: a flag missing or wrong elsewhere is reported by the real parse.
pub fn config_file(
    cmd: &Command,
    args: &[OsString],
    default: &Path,
) -> Option<(String, PathBuf, bool)> {
    let m = cmd
        .clone()
        .ignore_errors(true)
        .try_get_matches_from(args)
        .ok()?;
    let (name, sub) = m.subcommand()?;
    let sub_cmd = cmd.find_subcommand(name)?;
    sub_cmd.get_arguments().find(|a| a.get_id() == "config")?;
    Some(match sub.get_one::<PathBuf>("config") {
        Some(named) => (name.to_owned(), named.clone(), true),
        None => (name.to_owned(), default.to_owned(), false),
    })
}

/// Parses `args` by `cmd`, the subcommand's configuration file (see `config_file`) giving its flags' defaults.
/// A wrong command line ends the process as clap does (usage, or help and version); a wrong file is returned.
pub fn matches(
    cmd: Command,
    args: Vec<OsString>,
    default: &Path,
) -> Result<clap::ArgMatches, FileError> {
    let mut cmd = cmd;
    if let Some((name, file, named)) = config_file(&cmd, &args, default) {
        let sub = cmd.find_subcommand(&name).cloned();
        if let Some(sub) = sub {
            let sub = with_file(sub, &file, named)?;
            cmd = cmd.mut_subcommand(name, |_| sub);
        }
    }
    Ok(cmd.get_matches_from(args))
}

/// A configuration file that cannot be used: the file, the key (if it is one key's fault) and why.
#[derive(Debug, thiserror::Error)]
#[error("{}: {}{reason}", file.display(), key.as_ref().map(|k| format!("{k}: ")).unwrap_or_default())]
pub struct FileError {
    pub file: PathBuf,
    pub key: Option<String>,
    pub reason: String,
}

/// Reads `file` (a YAML mapping of `cmd`'s long flag names to values) and makes each value its flag's default,
/// checked by the flag's own parser. `Ok(cmd)` unchanged when `file` is missing and `required` is false (the
/// default path); a missing file given by name is an error.
pub fn with_file(cmd: Command, file: &Path, required: bool) -> Result<Command, FileError> {
    let err = |key: Option<&str>, reason: String| FileError {
        file: file.to_owned(),
        key: key.map(str::to_owned),
        reason,
    };
    let text = match std::fs::read_to_string(file) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && !required => return Ok(cmd),
        Err(e) => return Err(err(None, e.to_string())),
    };
    let values = parse(&text).map_err(|r| err(None, r))?;
    let mut cmd = cmd;
    for (key, given) in values {
        let arg = cmd
            .get_arguments()
            .find(|a| a.get_long() == Some(key.as_str()) && takes_setting(a))
            .ok_or_else(|| {
                err(
                    Some(&key),
                    format!("not a flag of `{}` (see --help)", cmd.get_name()),
                )
            })?
            .clone();
        if key == "config" {
            return Err(err(Some(&key), "names the file itself".into()));
        }
        let strings = match (given, arg.get_action()) {
            (Value::One(v), ArgAction::SetTrue | ArgAction::SetFalse) => match v.as_str() {
                "true" | "false" => vec![v],
                _ => return Err(err(Some(&key), format!("{v:?} is not true or false"))),
            },
            (Value::One(v), _) => vec![v],
            (Value::Many(vs), ArgAction::Append) => vs,
            (Value::Many(vs), _) => {
                return Err(err(
                    Some(&key),
                    format!("takes one value, the file gives {}", vs.len()),
                ))
            }
        };
        for s in &strings {
            check(&arg, s).map_err(|e| err(Some(&key), e))?;
        }
        let id = arg.get_id().clone();
        cmd = cmd.mut_arg(id, |a| a.required(false).default_values(strings));
    }
    Ok(cmd)
}

/// Parses `value` as `arg`'s value alone, by clap with the flag's own parser, delimiter and count (and none
/// of its relations to other flags, which a file's defaults do not take part in).
fn check(arg: &Arg, value: &str) -> Result<(), String> {
    let Some(long) = arg.get_long() else {
        return Ok(());
    };
    if matches!(arg.get_action(), ArgAction::SetTrue | ArgAction::SetFalse) {
        return Ok(());
    }
    let mut alone = Arg::new(arg.get_id().clone())
        .long(long.to_owned())
        .action(arg.get_action().clone())
        .value_parser(arg.get_value_parser().clone())
        .value_delimiter(arg.get_value_delimiter());
    if let Some(n) = arg.get_num_args() {
        alone = alone.num_args(n);
    }
    Command::new("check")
        .no_binary_name(true)
        .arg(alone)
        .try_get_matches_from([format!("--{long}"), value.to_owned()])
        .map(drop)
        .map_err(|e| first_line(&e.to_string()))
}

fn first_line(s: &str) -> String {
    s.lines()
        .next()
        .unwrap_or_default()
        .trim_start_matches("error: ")
        .to_owned()
}

/// A key's value: one, or a list (for a repeatable flag).
#[derive(Debug, PartialEq)]
enum Value {
    One(String),
    Many(Vec<String>),
}

/// The file's keys and values. Scalars are taken as text (numbers and booleans as written);
/// a mapping, a null or a nested list is refused.
fn parse(text: &str) -> Result<Vec<(String, Value)>, String> {
    let doc: serde_json::Value = if text.trim().is_empty() {
        serde_json::Value::Object(Default::default())
    } else {
        // YAML 1.2's booleans only: `n` or `no` is text (a namespace, say), not false.
        let options =
            serde_saphyr::options! { strict_booleans: true, leading_zero_numbers_as_strings: true };
        serde_saphyr::from_str_with_options(text, options).map_err(|e| e.to_string())?
    };
    let serde_json::Value::Object(map) = doc else {
        return Err("not a mapping of flag names to values".into());
    };
    map.into_iter()
        .map(|(k, v)| {
            let value = match v {
                serde_json::Value::Array(items) => Value::Many(
                    items
                        .into_iter()
                        .map(|i| scalar(i).ok_or_else(|| format!("{k}: a list of scalars only")))
                        .collect::<Result<_, _>>()?,
                ),
                v => Value::One(scalar(v).ok_or_else(|| format!("{k}: not a scalar or list"))?),
            };
            Ok((k, value))
        })
        .collect()
}

fn scalar(v: serde_json::Value) -> Option<String> {
    match v {
        serde_json::Value::String(s) => Some(s),
        serde_json::Value::Number(n) => Some(n.to_string()),
        serde_json::Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// How log lines are written on standard error (`--log-format`, or FOOTHOLD_LOG_FORMAT).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// A line for people: time, level, target, message and fields.
    Text,
    /// One JSON object a line (`timestamp`, `level`, `target`, `fields` with `message`), for log collectors.
    Json,
}

/// Logging on standard error in `format`, filtered by FOOTHOLD_LOG (tracing's filter syntax; default `info`).
/// Data a command reports goes to standard output, never here.
pub fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("FOOTHOLD_LOG")
        .unwrap_or_else(|_| "info".into());
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => logs
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init(),
        LogFormat::Json => logs.json().init(),
    }
}

/// Writes the man pages `foothold_names::cli::man_pages` renders for `cmd` into `dir` (or with `markdown` its
/// Markdown page and the generated reference's, `crate::reference`), each whole or not at all; returns their
/// paths.
pub fn write_man_pages(cmd: Command, dir: &Path, markdown: bool) -> std::io::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let mut written = Vec::new();
    let mut pages = foothold_names::cli::pages(cmd, markdown)?;
    if markdown {
        pages.extend(
            crate::reference::pages()
                .into_iter()
                .map(|(name, text)| (name.to_owned(), text.into_bytes())),
        );
    }
    for (name, page) in pages {
        let path = dir.join(name);
        crate::apt::write_file(&path, &page, 0o644)?;
        written.push(path);
    }
    Ok(written)
}

#[cfg(test)]
mod tests;
