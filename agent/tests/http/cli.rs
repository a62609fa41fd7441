//! The command line's conventions, on the real binary: `serve`'s flags from a configuration file and
//! FOOTHOLD_* variables (the command line winning over the environment, which wins over the file), bash
//! completion in a bash that sourced the script, man pages `man` renders, and logs as JSON lines.

use std::path::Path;
use std::process::Command;

use crate::support::{agent_bin, free_port, http, Agent};

#[path = "../../../names/tests/support/cli.rs"]
mod cli_support;
use cli_support::{bash_complete, man_page, reference_is_current};

fn token_file(dir: &Path, name: &str) -> String {
    let path = dir.join(format!("{name}.token"));
    std::fs::write(&path, name).unwrap();
    path.display().to_string()
}

/// Whether `token` may start an upload: the admin token the agent took is the one its file holds.
fn writes_with(agent: &Agent, token: &str) -> u16 {
    http()
        .post(&agent.url("/v2/cli/blobs/uploads/"))
        .header("Authorization", &format!("Bearer {token}"))
        .send_empty()
        .unwrap()
        .status()
        .as_u16()
}

#[test]
fn serve_takes_its_flags_from_the_command_line_then_the_environment_then_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let file_port = free_port();
    let config = dir.path().join("agent.yaml");
    std::fs::write(
        &config,
        format!(
            "# the appliance's file is like this one\nlisten: 127.0.0.1:{file_port}\ndata: {}\n\
             no-controllers: true\ntoken-file: {}\n",
            data.display(),
            token_file(dir.path(), "from-file"),
        ),
    )
    .unwrap();
    let serve = |env: &[(&str, String)], args: &[&str]| {
        let mut cmd = Command::new(agent_bin());
        cmd.args(["serve", "--config"]).arg(&config).args(args);
        for (k, v) in env {
            cmd.env(k, v);
        }
        Agent::spawn(cmd, &data, None)
    };

    // The file alone.
    let mut agent = serve(&[], &[]);
    assert_eq!(agent.addr.port(), file_port);
    assert_eq!(writes_with(&agent, "from-file"), 202);
    assert_eq!(writes_with(&agent, "from-env"), 401);
    agent.kill();

    // The environment over the file.
    let env = [
        ("FOOTHOLD_LISTEN", "127.0.0.1:0".to_owned()),
        ("FOOTHOLD_TOKEN_FILE", token_file(dir.path(), "from-env")),
    ];
    let mut agent = serve(&env, &[]);
    assert_ne!(
        agent.addr.port(),
        file_port,
        "FOOTHOLD_LISTEN lost to the file"
    );
    assert_eq!(writes_with(&agent, "from-env"), 202);
    assert_eq!(writes_with(&agent, "from-file"), 401);
    agent.kill();

    // The command line over both.
    let cli_port = free_port();
    let cli_token = token_file(dir.path(), "from-cli");
    let listen = format!("127.0.0.1:{cli_port}");
    let agent = serve(&env, &["--listen", &listen, "--token-file", &cli_token]);
    assert_eq!(agent.addr.port(), cli_port);
    assert_eq!(writes_with(&agent, "from-cli"), 202);
    assert_eq!(writes_with(&agent, "from-env"), 401);
}

#[test]
fn a_wrong_configuration_file_is_named_with_its_key_and_nothing_starts() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("agent.yaml");
    let run = |env: Option<&Path>| {
        let mut cmd = Command::new(agent_bin());
        cmd.arg("serve").arg("--data").arg(dir.path().join("data"));
        match env {
            Some(file) => cmd.env("FOOTHOLD_CONFIG", file),
            None => cmd.arg("--config").arg(&config),
        };
        let out = cmd.output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    for (text, want) in [
        ("max-uploads: many\n", "max-uploads: invalid value 'many'"),
        (
            "listen: [a, b]\n",
            "listen: takes one value, the file gives 2",
        ),
        ("lisen: 127.0.0.1:5000\n", "lisen: not a flag of `serve`"),
        (
            "sendfile: sometimes\n",
            "sendfile: invalid value 'sometimes'",
        ),
    ] {
        std::fs::write(&config, text).unwrap();
        let (code, stderr) = run(None);
        assert_eq!(code, Some(2), "{text}: {stderr}");
        assert!(
            stderr.starts_with(&format!("foothold-agent: {}: {want}", config.display())),
            "{text}: {stderr}"
        );
    }
    assert!(
        !dir.path().join("data").exists(),
        "a refused start made its data directory"
    );
    // A certificate without its key would serve plain HTTP: refused, as on the command line.
    std::fs::write(&config, "tls-cert: /etc/foothold/tls/cert.pem\n").unwrap();
    let (code, stderr) = run(None);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("--tls-cert and --tls-key go together"),
        "{stderr}"
    );
    // Named by the environment and missing.
    let missing = dir.path().join("absent.yaml");
    let (code, stderr) = run(Some(&missing));
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!("{}: No such file", missing.display())),
        "{stderr}"
    );
}

#[test]
fn bash_completes_subcommands_and_flags() {
    let bin = agent_bin();
    assert_eq!(bash_complete(&bin, &["foothold-agent", "se"]), ["serve"]);
    assert_eq!(
        bash_complete(&bin, &["foothold-agent", "serve", "--max-up"]),
        ["--max-uploads"]
    );
    let creds = bash_complete(&bin, &["foothold-agent", "credentials", ""]);
    for sub in ["add", "list", "remove"] {
        assert!(creds.iter().any(|c| c == sub), "{sub}: {creds:?}");
    }
}

#[test]
fn man_pages_render_with_every_flag_and_its_variable() {
    let dir = tempfile::tempdir().unwrap();
    let text = man_page(&agent_bin(), dir.path(), "foothold-agent-serve.1");
    for want in [
        "--max-uploads",
        "FOOTHOLD_MAX_UPLOADS",
        "--config",
        "FOOTHOLD_CONFIG",
    ] {
        assert!(text.contains(want), "{want}:\n{text}");
    }
    assert!(dir.path().join("foothold-agent-credentials-add.1").exists());
}

#[test]
fn log_format_json_writes_each_log_line_as_one_json_object() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(agent_bin())
        .args(["serve", "--no-controllers", "--listen", "127.0.0.1:0"])
        .arg("--data")
        .arg(dir.path().join("data"))
        .args(["--log-format", "json"])
        .env("FOOTHOLD_LOG", "info")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead as _;
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut seen = Vec::new();
    let addr = loop {
        let line = rx
            .recv_timeout(std::time::Duration::from_secs(30))
            .unwrap_or_else(|e| panic!("no `listening` line within 30 s ({e}); lines: {seen:#?}"));
        let object: serde_json::Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("a log line that is not JSON ({e}): {line}"));
        for key in ["timestamp", "level", "target"] {
            assert!(object[key].is_string(), "no {key}: {line}");
        }
        seen.push(line);
        if object["fields"]["message"] == "listening" {
            break object["fields"]["addr"].as_str().unwrap().to_owned();
        }
    };
    // The address it logged is the one it serves on.
    let status = http()
        .get(&format!("http://{addr}/healthz"))
        .call()
        .unwrap()
        .status();
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(status, 200);

    // A format it does not have: refused before anything runs, naming the ones it has.
    let out = Command::new(agent_bin())
        .args(["fsck", "--data"])
        .arg(dir.path().join("data"))
        .env("FOOTHOLD_LOG_FORMAT", "xml")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("invalid value 'xml' for '--log-format")
            && stderr.contains("[possible values: text, json]"),
        "{stderr}"
    );
}

#[test]
fn the_command_reference_in_docs_is_the_binary_s() {
    reference_is_current(
        &agent_bin(),
        &[
            "## `foothold-agent serve`",
            "`FOOTHOLD_MAX_UPLOADS`",
            "## `foothold-agent credentials add`",
        ],
    );
}
