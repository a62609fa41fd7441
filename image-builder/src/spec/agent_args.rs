//! `components.agentArgs` read as `foothold-agent serve`'s flags, which the image's agent takes from its
//! configuration file.

/// `foothold-agent serve`'s configuration file in an image (`foothold-agent.service` runs `serve --config` it;
/// the builder writes it from Foothold's flags and these).
pub const AGENT_CONFIG: &str = "/etc/foothold/agent.yaml";

/// `args` as flags, in order: (long name, value), a flag alone (`--no-controllers`) without one. A flag is
/// `--name value`, `--name=value` (for a value that starts with `--`) or `--name` followed by another flag or
/// nothing. The error names the argument's index and why.
pub fn agent_flags(args: &[String]) -> Result<Vec<(String, Option<String>)>, String> {
    let mut flags = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let arg = &args[i];
        let Some(flag) = arg.strip_prefix("--") else {
            return Err(format!(
                "[{i}]: {arg:?} is not a --flag (a value follows its flag)"
            ));
        };
        let (name, value) = match flag.split_once('=') {
            Some((n, v)) => (n, Some(v.to_owned())),
            None => match args.get(i + 1).filter(|next| !next.starts_with("--")) {
                Some(next) => {
                    i += 1;
                    (flag, Some(next.clone()))
                }
                None => (flag, None),
            },
        };
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        {
            return Err(format!("[{i}]: {arg:?} is not a flag name"));
        }
        if name == "config" {
            return Err(format!(
                "[{i}]: --config: the image's agent reads its flags from {}",
                AGENT_CONFIG
            ));
        }
        flags.push((name.to_owned(), value));
        i += 1;
    }
    Ok(flags)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn flags_with_values_alone_and_with_equals() {
        let f = agent_flags(&args(&[
            "--no-controllers",
            "--lease-duration-seconds",
            "60",
            "--identity=--odd",
            "--files-require-token",
        ]))
        .unwrap();
        assert_eq!(
            f,
            [
                ("no-controllers".into(), None),
                ("lease-duration-seconds".into(), Some("60".into())),
                ("identity".into(), Some("--odd".into())),
                ("files-require-token".into(), None),
            ]
        );
    }

    #[test]
    fn what_is_not_a_flag_is_named() {
        for (a, want) in [
            (&["60"][..], "[0]: \"60\" is not a --flag"),
            (&["--a", "1", "2"][..], "[2]: \"2\" is not a --flag"),
            (&["--Listen", "x"][..], "is not a flag name"),
            (&["--", "x"][..], "is not a flag name"),
            (&["--config", "/x"][..], "--config: the image's agent reads"),
        ] {
            let e = agent_flags(&args(a)).unwrap_err();
            assert!(e.contains(want), "{a:?}: {e}");
        }
    }
}
