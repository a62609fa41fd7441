use super::*;

#[derive(clap::Parser, Debug)]
#[command(name = "tool")]
struct Tool {
    #[command(subcommand)]
    command: Sub,
}

#[derive(clap::Subcommand, Debug)]
enum Sub {
    Serve {
        #[arg(long)]
        config: Option<PathBuf>,
        #[arg(long, default_value = "127.0.0.1:5000")]
        listen: std::net::SocketAddr,
        #[arg(long, default_value_t = 8)]
        max_uploads: usize,
        #[arg(long)]
        quiet: bool,
        #[arg(long = "check")]
        checks: Vec<String>,
        #[arg(long, value_delimiter = ',', default_value = "a,b", value_parser = ["a", "b"])]
        kinds: Vec<String>,
        #[arg(long, env = "TOOL_DATA")]
        data: Option<String>,
        #[arg(long, required = true)]
        name: String,
    },
}

fn serve_cmd() -> Command {
    use clap::CommandFactory as _;
    Tool::command()
        .find_subcommand("serve")
        .expect("serve")
        .clone()
}

fn file(text: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tool.yaml");
    std::fs::write(&path, text).unwrap();
    (dir, path)
}

/// Parses `args` (after `serve`) with `serve`'s flags from the file and from `env` (as clap reads them).
fn serve(text: &str, args: &[&str]) -> Result<clap::ArgMatches, String> {
    let (_d, path) = file(text);
    let cmd = with_file(with_env(serve_cmd()), &path, true).map_err(|e| e.to_string())?;
    cmd.try_get_matches_from(std::iter::once("serve").chain(args.iter().copied()))
        .map_err(|e| e.to_string())
}

#[test]
fn env_names_follow_the_long_flag() {
    assert_eq!(env_name("max-uploads"), "FOOTHOLD_MAX_UPLOADS");
    let cmd = with_env(serve_cmd());
    let env = |id: &str| {
        cmd.get_arguments()
            .find(|a| a.get_id() == id)
            .and_then(|a| a.get_env())
            .map(|e| e.to_string_lossy().into_owned())
    };
    assert_eq!(env("listen").as_deref(), Some("FOOTHOLD_LISTEN"));
    assert_eq!(env("quiet").as_deref(), Some("FOOTHOLD_QUIET"));
    // A flag's own variable is kept; help has none.
    assert_eq!(env("data").as_deref(), Some("TOOL_DATA"));
    assert_eq!(env("help"), None);
}

#[test]
fn file_values_are_defaults_below_the_command_line() {
    // `n` is a name, not YAML 1.1's false.
    let text =
        "listen: 0.0.0.0:6000\nmax-uploads: 3\nquiet: true\ncheck: [x=1, y=2]\nkinds: b\nname: n\n";
    let m = serve(text, &[]).unwrap();
    assert_eq!(
        m.get_one::<std::net::SocketAddr>("listen").unwrap().port(),
        6000
    );
    assert_eq!(m.get_one::<usize>("max_uploads"), Some(&3));
    assert!(m.get_flag("quiet"));
    let checks: Vec<&String> = m.get_many("checks").unwrap().collect();
    assert_eq!(checks, ["x=1", "y=2"]);
    let kinds: Vec<&String> = m.get_many("kinds").unwrap().collect();
    assert_eq!(kinds, ["b"]);
    // The command line wins; a required flag the file gives is no longer missing.
    let m = serve(text, &["--listen", "127.0.0.1:7000", "--check", "z=3"]).unwrap();
    assert_eq!(
        m.get_one::<std::net::SocketAddr>("listen").unwrap().port(),
        7000
    );
    let checks: Vec<&String> = m.get_many("checks").unwrap().collect();
    assert_eq!(checks, ["z=3"]);
    assert_eq!(m.get_one::<String>("name").unwrap(), "n");
    // An empty file changes nothing: the required flag is missing again.
    let e = serve("", &[]).unwrap_err();
    assert!(e.contains("--name"), "{e}");
}

#[test]
fn a_file_s_delimited_list_is_split_as_on_the_command_line() {
    let m = serve("kinds: a,b\nname: n\n", &[]).unwrap();
    let kinds: Vec<&String> = m.get_many("kinds").unwrap().collect();
    assert_eq!(kinds, ["a", "b"]);
}

#[test]
fn bad_files_name_the_file_the_key_and_the_reason() {
    let cases = [
        ("nope: 1\n", "nope: not a flag of `serve`"),
        ("max-uploads: many\n", "max-uploads: invalid value 'many'"),
        (
            "listen: [a, b]\n",
            "listen: takes one value, the file gives 2",
        ),
        ("quiet: maybe\n", "quiet: \"maybe\" is not true or false"),
        ("check: {a: 1}\n", "check: not a scalar or list"),
        ("check: [[a]]\n", "check: a list of scalars only"),
        ("help: true\n", "help: not a flag of `serve`"),
        ("config: /etc/x\n", "config: names the file itself"),
        ("- a\n- b\n", "not a mapping of flag names to values"),
        ("kinds: a,\n", "kinds: a value is required for '--kinds"),
    ];
    for (text, want) in cases {
        let e = serve(text, &[]).unwrap_err();
        assert!(e.contains("tool.yaml: "), "{text:?}: {e}");
        assert!(e.contains(want), "{text:?}: {e}");
    }
}

#[test]
fn a_missing_file_is_an_error_only_when_named() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("absent.yaml");
    assert!(with_file(serve_cmd(), &missing, false).is_ok());
    let e = with_file(serve_cmd(), &missing, true).unwrap_err();
    assert_eq!(e.file, missing);
    assert!(e.to_string().contains("absent.yaml: "), "{e}");
}

#[test]
fn the_config_flag_is_found_before_the_real_parse() {
    use clap::CommandFactory as _;
    let args = |a: &[&str]| a.iter().map(OsString::from).collect::<Vec<_>>();
    let cmd = Tool::command();
    let default = Path::new("/etc/tool.yaml");
    // --name is missing: the early look still finds the file.
    assert_eq!(
        config_file(
            &cmd,
            &args(&["tool", "serve", "--config", "/x.yaml"]),
            default
        ),
        Some(("serve".into(), PathBuf::from("/x.yaml"), true))
    );
    assert_eq!(
        config_file(&cmd, &args(&["tool", "serve"]), default),
        Some(("serve".into(), default.to_owned(), false))
    );
    assert_eq!(config_file(&cmd, &args(&["tool", "--help"]), default), None);
}

#[test]
fn matches_reads_the_subcommand_s_file() {
    use clap::CommandFactory as _;
    let (_d, path) = file("name: from-file\nmax-uploads: 5\n");
    let args: Vec<OsString> = ["tool", "serve", "--config"]
        .into_iter()
        .map(OsString::from)
        .chain([path.clone().into_os_string()])
        .collect();
    let m = matches(Tool::command(), args, Path::new("/nonexistent")).unwrap();
    let (_, serve) = m.subcommand().unwrap();
    assert_eq!(serve.get_one::<String>("name").unwrap(), "from-file");
    assert_eq!(serve.get_one::<usize>("max_uploads"), Some(&5));
    // The default path, present, is read too; a wrong one names itself.
    let (_d2, bad) = file("max-uploads: -1\n");
    let args: Vec<OsString> = ["tool", "serve", "--name", "x"]
        .map(OsString::from)
        .to_vec();
    let e = matches(Tool::command(), args, &bad).unwrap_err();
    assert_eq!(e.file, bad);
    assert_eq!(e.key.as_deref(), Some("max-uploads"));
}

#[test]
fn man_pages_are_written_for_every_subcommand() {
    use clap::CommandFactory as _;
    let dir = tempfile::tempdir().unwrap();
    let pages = write_man_pages(Tool::command(), &dir.path().join("man1"), false).unwrap();
    let names: Vec<String> = pages
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["tool-serve.1", "tool.1"]);
    let serve = std::fs::read_to_string(&pages[0]).unwrap();
    assert!(serve.contains(".TH tool-serve 1"), "{serve}");
    assert!(serve.contains("max\\-uploads"), "{serve}");
}
