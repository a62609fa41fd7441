//! The OpenAPI document at /openapi.json: every path the REST API, file server and tus routes serve is in it,
//! every `$ref` resolves, and schemathesis (from PyPI) fuzzes the running agent against it — no 5xx, and
//! statuses, content types, headers and bodies as the document says.

use crate::support;

use std::process::Command;

use crate::support::{tool, Agent};
use serde_json::Value;

const TOKEN: &str = "openapi-token";

fn refs(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, v) in m {
                match (k.as_str(), v) {
                    ("$ref", Value::String(r)) => out.push(r.clone()),
                    _ => refs(v, out),
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|v| refs(v, out)),
        _ => {}
    }
}

#[test]
fn the_document_is_complete_and_schemathesis_finds_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let agent = Agent::start(&tmp.path().join("data"), Some(TOKEN));
    let doc: Value = serde_json::from_str(
        &support::http()
            .get(&agent.url("/openapi.json"))
            .call()
            .unwrap()
            .into_body()
            .read_to_string()
            .unwrap(),
    )
    .unwrap();
    let paths: Vec<&str> = doc["paths"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    for p in [
        "/v1/baremetalcluster/{owner}/{cluster}/status",
        "/v1/baremetalcluster/{owner}/{cluster}/{kind}",
        "/v1/baremetalcluster/{owner}/{cluster}/{kind}/{name}",
        "/files/{owner}/{cluster}/{kind}/{name}",
        "/v1/uploads",
        "/v1/uploads/{id}",
    ] {
        assert!(paths.contains(&p), "{p} is not documented: {paths:?}");
    }
    let mut all = Vec::new();
    refs(&doc, &mut all);
    assert!(!all.is_empty());
    for r in all {
        let name = r.strip_prefix("#/components/schemas/").unwrap_or(&r);
        assert!(
            doc["components"]["schemas"].get(name).is_some(),
            "dangling $ref {r}"
        );
    }

    let hooks = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts");
    let out = Command::new(tool("st"))
        .env("SCHEMATHESIS_HOOKS", "schemathesis_hooks")
        .env("PYTHONPATH", hooks)
        .env("NO_COLOR", "1")
        .current_dir(tmp.path())
        .args(["run", &agent.url("/openapi.json")])
        .args(["-H", &format!("Authorization: Bearer {TOKEN}")])
        .args([
            "--checks",
            "not_a_server_error,status_code_conformance,content_type_conformance,\
             response_headers_conformance,response_schema_conformance",
            "--max-examples",
            "60",
            "--seed",
            "20261122",
        ])
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "schemathesis failed:\n{report}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(report.contains("passed"), "{report}");
}
