//! Named credentials with scopes, end to end: made with `foothold-agent credentials`, followed by a serving
//! agent without a restart, and used by a real client (skopeo) and plain HTTP. A read credential cannot push; a
//! writer pushes to its repositories only and never over a protected one (the installer image); reads can need
//! a credential; a removed credential stops working; every write is logged and counted with its credential.

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use crate::support::{self, agent_bin, layout, metric, run, stdout, tool, wait_for, Agent};

const ADMIN: &str = "site-admin-token";

fn credentials(file: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(agent_bin());
    c.arg("credentials").arg("--file").arg(file).args(args);
    c
}

/// `credentials add`: the token is the only thing on stdout.
fn add(file: &Path, args: &[&str]) -> String {
    let mut a = vec!["add"];
    a.extend_from_slice(args);
    stdout(&mut credentials(file, &a)).trim().to_owned()
}

/// `credentials add nodes --scope read --token-out OUT`: nothing on stdout, the token in the new file.
fn add_read(file: &Path, out: &Path) -> String {
    let printed = add(
        file,
        &[
            "nodes",
            "--scope",
            "read",
            "--token-out",
            out.to_str().unwrap(),
        ],
    );
    assert_eq!(printed, "", "the token goes to --token-out only");
    std::fs::read_to_string(out).unwrap().trim().to_owned()
}

fn skopeo_push(agent: &Agent, src: &Path, dest: &str, creds: Option<&str>) -> Output {
    let mut c = Command::new(tool("skopeo"));
    c.args(["--insecure-policy", "copy", "--dest-tls-verify=false"]);
    if let Some(creds) = creds {
        c.args(["--dest-creds", creds]);
    }
    c.arg(format!("oci:{}:v1", src.display()))
        .arg(format!("docker://{}/{dest}", agent.host()))
        .output()
        .unwrap()
}

fn refused(out: &Output, want: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "expected a refusal naming {want:?}");
    assert!(stderr.contains(want), "{want:?} not in:\n{stderr}");
}

/// The status of a GET of `path` with `token` (or none).
fn get_status(agent: &Agent, path: &str, token: Option<&str>) -> u16 {
    let mut req = support::http().get(&agent.url(path));
    if let Some(t) = token {
        req = req.header("authorization", &format!("Bearer {t}"));
    }
    req.call().unwrap().status().as_u16()
}

#[test]
fn scoped_credentials_push_where_they_may_and_nowhere_else() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("credentials.yaml");
    let protected = tmp.path().join("protected");
    std::fs::write(
        &protected,
        "# the appliance's own images\nfoothold/installer\nregistry.k8s.io/\n",
    )
    .unwrap();
    let ci = add(
        &file,
        &[
            "ci",
            "--scope",
            "write",
            "--repository",
            "apps/",
            "--repository",
            "foothold/",
            "--owner",
            "acme",
        ],
    );
    let nodes = add_read(&file, &tmp.path().join("nodes.token"));
    let list = stdout(&mut credentials(&file, &["list"]));
    assert!(list.starts_with("reads: anonymous\n"), "{list}");
    assert!(
        list.contains("ci\twrite\trepositories apps/,foothold/; owners acme\t"),
        "{list}"
    );
    assert!(list.contains("nodes\tread\t-\t"), "{list}");
    // The same as JSON and YAML for programs, without the tokens' hashes.
    let json: serde_json::Value =
        serde_json::from_str(&stdout(&mut credentials(&file, &["list", "-o", "json"]))).unwrap();
    assert_eq!(json["reads"], "anonymous", "{json}");
    let ci_entry = json["credentials"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "ci")
        .unwrap_or_else(|| panic!("no ci: {json}"));
    assert_eq!(ci_entry["scope"], "write");
    assert_eq!(
        ci_entry["repositories"],
        serde_json::json!(["apps/", "foothold/"])
    );
    assert_eq!(ci_entry["owners"], serde_json::json!(["acme"]));
    assert!(ci_entry["created"].is_string(), "{json}");
    let yaml = stdout(&mut credentials(&file, &["list", "--output", "yaml"]));
    assert!(
        yaml.starts_with("reads: anonymous\n") && yaml.contains("name: nodes"),
        "{yaml}"
    );
    for text in [json.to_string(), yaml] {
        assert!(!text.contains("sha256"), "{text}");
    }
    // Bad input names the file and the reason.
    let out = credentials(&file, &["add", "x", "--scope", "write"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&file.display().to_string()) && err.contains("needs repositories or owners"),
        "{err}"
    );

    let data = tmp.path().join("data");
    let agent = Agent::start_with(
        &data,
        Some(ADMIN),
        "127.0.0.1:0",
        &[
            "--credentials",
            file.to_str().unwrap(),
            "--protected-repositories",
            protected.to_str().unwrap(),
        ],
    );
    let src = tmp.path().join("src");
    let image = layout::write_image(&src, 3, &[40_000, 90_000], "v1");
    let admin = format!("admin:{ADMIN}");
    let ci_creds = format!("ci:{ci}");

    // The admin writes the protected installer image; the writer pushes under its prefixes.
    assert!(
        skopeo_push(&agent, &src, "foothold/installer:v1", Some(&admin))
            .status
            .success()
    );
    let pushed = skopeo_push(&agent, &src, "apps/web:v1", Some(&ci_creds));
    assert!(
        pushed.status.success(),
        "{}",
        String::from_utf8_lossy(&pushed.stderr)
    );
    assert!(
        skopeo_push(&agent, &src, "foothold/tools:v1", Some(&ci_creds))
            .status
            .success()
    );
    // ...but not over the installer image, though `foothold/` matches it, and not outside its patterns.
    refused(
        &skopeo_push(&agent, &src, "foothold/installer:v1", Some(&ci_creds)),
        "repository foothold/installer is protected",
    );
    refused(
        &skopeo_push(&agent, &src, "registry.k8s.io/pause:v1", Some(&ci_creds)),
        "is protected",
    );
    refused(
        &skopeo_push(&agent, &src, "other/web:v1", Some(&ci_creds)),
        "credential ci does not write repository other/web",
    );
    // A read credential pushes nothing; no credential, or a wrong one of the right length, neither.
    refused(
        &skopeo_push(&agent, &src, "apps/web:v2", Some(&format!("nodes:{nodes}"))),
        "credential nodes is read-only",
    );
    refused(
        &skopeo_push(&agent, &src, "apps/web:v2", None),
        "unauthorized",
    );
    let mut wrong = ci.clone().into_bytes();
    wrong[0] ^= 1;
    refused(
        &skopeo_push(
            &agent,
            &src,
            "apps/web:v2",
            Some(&format!("ci:{}", String::from_utf8(wrong).unwrap())),
        ),
        "unauthorized",
    );
    // The protected image is still the admin's.
    assert_eq!(
        support::remote_manifest_digest(
            &["--tls-verify=false"],
            &format!("{}/foothold/installer:v1", agent.host())
        ),
        image.manifest_digest
    );

    // Writes are logged and counted under the credential's name.
    let metrics = agent.metrics();
    assert!(
        metric(&metrics, "foothold_writes_total{credential=\"ci\"}") >= 2,
        "{metrics}"
    );
    assert!(
        metric(&metrics, "foothold_writes_total{credential=\"admin\"}") >= 1,
        "{metrics}"
    );
    assert!(
        !metrics.contains("foothold_writes_total{credential=\"nodes\"}"),
        "{metrics}"
    );
    let log = std::fs::read_to_string(data.with_extension("log")).unwrap();
    let audit: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("foothold_agent::audit"))
        .collect();
    assert!(
        audit
            .iter()
            .any(|l| l.contains("credential=\"ci\"") && l.contains("/v2/apps/web/manifests/v1")),
        "no audit line for ci's manifest in:\n{}",
        audit.join("\n")
    );

    // Reads that need a credential: the agent takes the file's change without a restart.
    assert_eq!(get_status(&agent, "/v2/apps/web/tags/list", None), 200);
    run(&mut credentials(&file, &["reads", "credential"]));
    wait_for(
        "anonymous reads to be refused",
        Duration::from_secs(30),
        || (get_status(&agent, "/v2/apps/web/tags/list", None) == 401).then_some(()),
    );
    assert_eq!(
        get_status(&agent, "/v2/apps/web/tags/list", Some(&nodes)),
        200
    );
    assert_eq!(
        get_status(&agent, "/files/acme/c/binary_images/none", None),
        401
    );
    assert_eq!(
        get_status(&agent, "/files/acme/c/binary_images/none", Some(&nodes)),
        404
    );

    // A removed credential stops working.
    run(&mut credentials(&file, &["remove", "ci"]));
    wait_for(
        "ci's token to stop working",
        Duration::from_secs(30),
        || (get_status(&agent, "/v2/apps/web/tags/list", Some(&ci)) == 401).then_some(()),
    );
    // A file broken by hand: logged, and the credentials before it stay in force.
    std::fs::write(&file, "credentials: [{name: nodes, scope: reader}]\n").unwrap();
    wait_for(
        "the broken file to be reported",
        Duration::from_secs(30),
        || {
            std::fs::read_to_string(data.with_extension("log"))
                .unwrap()
                .contains("does not load")
                .then_some(())
        },
    );
    assert_eq!(
        get_status(&agent, "/v2/apps/web/tags/list", Some(&nodes)),
        200
    );
    assert_eq!(get_status(&agent, "/v2/apps/web/tags/list", None), 401);
}

/// A site whose reads need a credential: containerd pulls through the agent with the read credential the
/// generated mirror configuration carries (mode 0600), and cannot without it.
#[test]
fn containerd_pulls_with_the_read_credential_its_mirror_configuration_carries() {
    use crate::support::containerd::{self, Containerd};
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("credentials.yaml");
    let token_file = tmp.path().join("nodes.token");
    add_read(&file, &token_file);
    run(&mut credentials(&file, &["reads", "credential"]));
    let agent = Agent::start_with(
        &tmp.path().join("data"),
        Some(ADMIN),
        "127.0.0.1:0",
        &["--credentials", file.to_str().unwrap()],
    );
    let src = tmp.path().join("src");
    let image = layout::write_image(&src, 4, &[120_000], "v1");
    let pushed = skopeo_push(
        &agent,
        &src,
        "docker.io/library/fh-read:v1",
        Some(&format!("admin:{ADMIN}")),
    );
    assert!(
        pushed.status.success(),
        "{}",
        String::from_utf8_lossy(&pushed.stderr)
    );

    let ctd = Containerd::start(&tmp.path().join("containerd"));
    let pull = |hosts: &Path| {
        ctd.ctr(&[
            "images",
            "pull",
            "--hosts-dir",
            hosts.to_str().unwrap(),
            "docker.io/library/fh-read:v1",
        ])
        .output()
        .unwrap()
    };
    let anonymous = containerd::mirror_hosts(&agent, "docker.io", &tmp.path().join("anonymous"));
    let out = pull(&anonymous);
    assert!(!out.status.success(), "an anonymous pull must be refused");
    let with = containerd::mirror_hosts_with(
        &agent,
        "docker.io",
        &tmp.path().join("with"),
        &["--read-token-file", token_file.to_str().unwrap()],
    );
    let toml = with.join("docker.io/hosts.toml");
    use std::os::unix::fs::PermissionsExt as _;
    assert_eq!(
        std::fs::metadata(&toml).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let out = pull(&with);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listed = stdout(&mut ctd.ctr(&["images", "ls"]));
    assert!(listed.contains(&image.manifest_digest), "{listed}");
    let log = std::fs::read_to_string(agent.data.with_extension("log")).unwrap();
    assert!(
        log.lines()
            .any(|l| l.contains("/v2/library/fh-read/manifests/v1")
                && l.contains("credential=\"nodes\"")),
        "containerd's pull was not made with the nodes credential"
    );
}

/// A tus upload is its maker's: another writer's HEAD, PATCH, DELETE and binding all find no such upload (an id
/// is not a credential), an admin sees it, and its maker finishes and binds it.
#[test]
fn a_tus_upload_answers_only_its_maker_and_admins() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("credentials.yaml");
    let ci = add(&file, &["ci", "--scope", "write", "--owner", "acme"]);
    let ops = add(&file, &["ops", "--scope", "write", "--owner", "acme"]);
    let agent = Agent::start_with(
        &tmp.path().join("data"),
        Some(ADMIN),
        "127.0.0.1:0",
        &["--credentials", file.to_str().unwrap()],
    );
    let http = support::http();
    let tus = |method: &str, path: &str, token: &str, body: Option<&[u8]>| {
        let url = agent.url(path);
        let auth = format!("Bearer {token}");
        let r = match method {
            "HEAD" => http
                .head(&url)
                .header("authorization", &auth)
                .header("tus-resumable", "1.0.0")
                .call(),
            "DELETE" => http
                .delete(&url)
                .header("authorization", &auth)
                .header("tus-resumable", "1.0.0")
                .call(),
            "POST" => http
                .post(&url)
                .header("authorization", &auth)
                .header("tus-resumable", "1.0.0")
                .header("upload-length", "5")
                .send_empty(),
            _ => http
                .patch(&url)
                .header("authorization", &auth)
                .header("tus-resumable", "1.0.0")
                .header("content-type", "application/offset+octet-stream")
                .header("upload-offset", "0")
                .send(body.unwrap()),
        };
        r.unwrap()
    };
    let made = tus("POST", "/v1/uploads", &ci, None);
    assert_eq!(made.status(), 201);
    let location = made.headers()["location"].to_str().unwrap().to_owned();

    // Another writer, with the same scope: no such upload, whatever it asks.
    for (method, body) in [
        ("HEAD", None),
        ("PATCH", Some(&b"other"[..])),
        ("DELETE", None),
    ] {
        let r = tus(method, &location, &ops, body);
        assert_eq!(r.status(), 404, "{method} by another writer");
    }
    let bind = |token: &str| {
        let r = http
            .post(&agent.url("/v1/baremetalcluster/acme/c1/binary_images"))
            .header("authorization", &format!("Bearer {token}"))
            .header("content-type", "application/json")
            .send(serde_json::json!({"image_name": "tool", "tus_upload": location}).to_string())
            .unwrap();
        (r.status().as_u16(), r.into_body().read_to_string().unwrap())
    };
    // An admin sees it, untouched by the other writer's PATCH.
    let head = tus("HEAD", &location, ADMIN, None);
    assert_eq!(head.status(), 200);
    assert_eq!(head.headers()["upload-offset"], "0");

    // Its maker finishes it; the other writer still cannot bind it, its maker can.
    assert_eq!(tus("PATCH", &location, &ci, Some(b"hello")).status(), 204);
    let (status, body) = bind(&ops);
    assert_eq!(status, 404, "{body}");
    assert!(body.contains("TUS_UPLOAD_UNKNOWN"), "{body}");
    let (status, body) = bind(&ci);
    assert_eq!(status, 201, "{body}");
    let record: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(record["upload_complete"], true, "{record}");
    assert_eq!(record["image_length"], 5, "{record}");
}
