//! The curl commands of ICN's BPA REST API README (`cmd/bpa-restapi-agent/README.md`), run as written against
//! the agent binary, with ICN's own `sample.json` (`agent/tests/fixtures/icn`, unmodified) and an image of the
//! length it declares: create (multipart), read, upload in one PATCH, read it complete, update the description
//! (multipart PUT), delete; then the README's resumable upload: a PATCH cut off part way, a read of how far it
//! got, and the rest sent from there.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

use crate::support::{self, Agent};

/// `curl -i …`: the status line, headers and body of the last response.
fn curl(args: &[&str]) -> (u16, String, String) {
    let out = Command::new("curl").arg("-sS").args(args).output().unwrap();
    assert!(
        out.status.success() || out.status.code() == Some(28),
        "curl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    // The last response (after any `100 Continue`).
    let last = text
        .rfind("HTTP/1.1 ")
        .map_or(text.as_str(), |i| &text[i..]);
    let (head, body) = last.split_once("\r\n\r\n").unwrap_or((last, ""));
    // None at all when curl was stopped before a response (`--max-time`).
    let status = head.get(9..12).map_or(0, |s| s.parse().unwrap());
    (status, head.to_owned(), body.to_owned())
}

fn record(body: &str) -> Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

#[test]
fn icns_readme_examples_work_as_written() {
    let tmp = tempfile::tempdir().unwrap();
    let agent = Agent::start(&tmp.path().join("data"), None);
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/icn");
    let sample = fixtures.join("sample.json");
    let sample_arg = format!("file=@{}", sample.display());
    let meta: Value = serde_json::from_str(&std::fs::read_to_string(&sample).unwrap()).unwrap();
    let length = meta["image_length"].as_u64().unwrap();
    // A container image, as ICN's example uploads one: a docker-archive made by skopeo, padded with zero
    // blocks (tar's own end-of-archive filler) to the length sample.json declares.
    let image = tmp.path().join("sample_image");
    let src = tmp.path().join("src");
    support::layout::write_image(&src, 7, &[20_000_000], "1.0");
    support::run(
        Command::new(support::tool("skopeo"))
            .args(["copy", "--quiet", &format!("oci:{}:1.0", src.display())])
            .arg(format!("docker-archive:{}:icn/sample:1", image.display())),
    );
    let made = std::fs::metadata(&image).unwrap().len();
    assert!(made < length, "the archive is {made} bytes, over {length}");
    let file = std::fs::OpenOptions::new()
        .append(true)
        .open(&image)
        .unwrap();
    file.set_len(length).unwrap();
    let image_arg = format!("@{}", image.display());
    let url = agent.url("/v1/baremetalcluster/alpha/beta/container_images");
    let one = format!("{url}/asdf246");
    let metadata = format!("metadata=<{};type=application/json", sample.display());

    // Create image - POST
    let (status, _, body) = curl(&["-i", "-F", &metadata, "-F", &sample_arg, "-X", "POST", &url]);
    assert_eq!(status, 201, "{body}");
    let r = record(&body);
    assert_eq!(
        (
            &r["owner"],
            &r["cluster_name"],
            &r["image_name"],
            &r["image_length"],
            &r["upload_complete"]
        ),
        (
            &meta["owner"],
            &meta["cluster_name"],
            &meta["image_name"],
            &meta["image_length"],
            &Value::Bool(false)
        ),
        "{body}"
    );
    assert_eq!(r["description"], meta["description"], "{body}");
    // List image - GET
    let (status, _, body) = curl(&["-i", "-X", "GET", &one]);
    assert_eq!(
        (status, record(&body)["image_offset"].clone()),
        (200, Value::from(0))
    );
    // Upload container image - PATCH
    // The README's PATCH, as written.
    let patch = [
        "--request",
        "PATCH",
        "--data-binary",
        &image_arg,
        &one,
        "--header",
        "Upload-Offset: 0",
        "--header",
        "Expect:",
        "-i",
    ];
    let (status, head, _) = curl(&patch);
    assert_eq!(status, 204, "{head}");
    assert!(
        head.to_lowercase()
            .contains(&format!("upload-offset: {length}")),
        "{head}"
    );
    // Check uploaded image - GET
    let r = record(&curl(&["-i", "-X", "GET", &one]).2);
    assert_eq!(
        (r["image_offset"].as_u64(), r["upload_complete"].as_bool()),
        (Some(length), Some(true))
    );
    // Update image description - PUT (ICN answers 201 Created; Foothold 200 OK, with the record)
    let (status, _, body) = curl(&["-i", "-F", &metadata, "-F", &sample_arg, "-X", "PUT", &one]);
    assert_eq!(status, 200, "{body}");
    assert_eq!(record(&body)["description"], meta["description"]);
    // Delete an image - DELETE
    let (status, _, _) = curl(&["-i", "-X", "DELETE", &one]);
    assert!((200..300).contains(&status), "{status}");
    assert_eq!(curl(&["-i", "-X", "GET", &one]).0, 404);

    // Resumable upload - PATCH at 200K/s, stopped after 2 s (the README stops it with Ctrl-C).
    assert_eq!(
        curl(&["-i", "-F", &metadata, "-F", &sample_arg, "-X", "POST", &url]).0,
        201
    );
    curl(&[&patch[..], &["--limit-rate", "200K", "--max-time", "2"]].concat());
    // Check upload - GET
    let r = record(&curl(&["-i", "-X", "GET", &one]).2);
    let offset = r["image_offset"].as_u64().unwrap();
    assert!(
        offset > 0 && offset < length && r["upload_complete"] == false,
        "{r}"
    );
    // The rest from there (the README pipes `dd skip=<offset> bs=1`; the same bytes, in bigger blocks).
    let rest = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "dd if={} iflag=skip_bytes skip={offset} bs=65536 status=none | curl -sS --request PATCH --data-binary @- {one} --header 'Upload-Offset: {offset}' --header 'Expect:' -i",
            image.display()
        ))
        .output()
        .unwrap();
    let rest = String::from_utf8_lossy(&rest.stdout).into_owned();
    assert!(rest.starts_with("HTTP/1.1 204"), "{rest}");
    assert!(
        rest.to_lowercase()
            .contains(&format!("upload-offset: {length}")),
        "{rest}"
    );
    let r = record(&curl(&["-i", "-X", "GET", &one]).2);
    assert_eq!(r["upload_complete"], true, "{r}");
    support::assert_fsck_clean(&tmp.path().join("data"));
}
