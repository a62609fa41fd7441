//! The alert rules and the dashboard in `monitoring/` read only what the agent exports: Prometheus's own
//! parsers (`promql-check`: the rule file as `promtool check rules` reads it, every panel's query) list the
//! metric names each alert and panel selects, and each is one a running agent's `/metrics` declares (its
//! `# TYPE` line; a histogram by its `_bucket`, `_sum` and `_count` series).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::support::{tool, Agent};

fn monitoring(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../monitoring")
        .join(file)
}

/// Every series name `/metrics` text declares, by its `# TYPE` lines.
fn exported(metrics: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in metrics.lines() {
        let Some(rest) = line.strip_prefix("# TYPE ") else {
            continue;
        };
        let mut words = rest.split_whitespace();
        let (Some(name), Some(kind)) = (words.next(), words.next()) else {
            continue;
        };
        match kind {
            "histogram" => {
                names.extend(["_bucket", "_sum", "_count"].map(|s| format!("{name}{s}")));
            }
            "summary" => {
                names.extend(["", "_sum", "_count"].map(|s| format!("{name}{s}")));
            }
            _ => {
                names.insert(name.to_owned());
            }
        }
    }
    names
}

/// `promql-check`'s report on a rule file and a dashboard: each alert's and panel's metric names.
fn check(rules: &Path, dashboard: &Path) -> Result<Value, String> {
    let out = Command::new(tool("promql-check"))
        .arg(rules)
        .arg(dashboard)
        .output()
        .unwrap();
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    Ok(serde_json::from_slice(&out.stdout).unwrap())
}

/// What the report's alerts and panels read that is not in `names`, as `alert NAME: metric` lines; an alert or
/// panel that reads no metric at all is named too.
fn unexported(report: &Value, names: &BTreeSet<String>) -> Vec<String> {
    let mut missing = Vec::new();
    for (kind, list) in [("alert", &report["alerts"]), ("panel", &report["panels"])] {
        for uses in list.as_array().into_iter().flatten() {
            let metrics = uses["metrics"].as_array().cloned().unwrap_or_default();
            if metrics.is_empty() {
                missing.push(format!("{kind} {}: reads no metric", uses["name"]));
            }
            for m in metrics {
                let m = m.as_str().unwrap_or_default();
                if !names.contains(m) {
                    missing.push(format!("{kind} {}: {m}", uses["name"]));
                }
            }
        }
    }
    missing
}

#[test]
fn every_metric_the_alerts_and_the_dashboard_read_is_one_the_agent_exports() {
    let tmp = tempfile::tempdir().unwrap();
    let agent = Agent::start(&tmp.path().join("data"), None);
    let metrics = agent.metrics();
    let names = exported(&metrics);
    let report = check(
        &monitoring("foothold-alerts.yaml"),
        &monitoring("foothold-dashboard.json"),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let missing = unexported(&report, &names);
    assert!(
        missing.is_empty(),
        "not in the agent's /metrics: {missing:#?}\n{metrics}"
    );
    // The alerts an operator of a remote site needs first are there.
    let alerts: Vec<&str> = report["alerts"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|a| a["name"].as_str())
        .collect();
    for want in [
        "FootholdCertificateExpiresSoon",
        "FootholdStoreFilesystemFull",
        "FootholdControllersNotLeading",
        "FootholdBareMetalHostError",
        "FootholdUploadBacklog",
    ] {
        assert!(alerts.contains(&want), "{want} not in {alerts:?}");
    }
    // The process and store file system gauges carry values, not only their declarations.
    for name in [
        "process_resident_memory_bytes",
        "process_open_fds",
        "foothold_store_filesystem_avail_bytes",
    ] {
        let value: f64 = metrics
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no {name} in {metrics}"))
            .parse()
            .unwrap();
        assert!(value > 0.0, "{name} {value}");
    }
}

#[test]
fn a_query_that_does_not_parse_or_reads_an_unexported_metric_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    let dashboard = monitoring("foothold-dashboard.json");
    let broken = tmp.path().join("broken.yaml");
    std::fs::write(
        &broken,
        "groups:\n  - name: g\n    rules:\n      - alert: Unclosed\n        expr: rate(foothold_reconciles_total[5m]\n",
    )
    .unwrap();
    let err = check(&broken, &dashboard).unwrap_err();
    assert!(
        err.contains("Unclosed") && err.contains("parse error"),
        "{err}"
    );

    let misspelt = tmp.path().join("misspelt.yaml");
    std::fs::write(
        &misspelt,
        "groups:\n  - name: g\n    rules:\n      - alert: Misspelt\n        \
         expr: foothold_controller_leaders < 1\n",
    )
    .unwrap();
    let report = check(&misspelt, &dashboard).unwrap_or_else(|e| panic!("{e}"));
    let names = exported(
        "# TYPE foothold_controller_leader gauge\nfoothold_controller_leader 1\n\
         # TYPE foothold_http_request_duration_seconds histogram\n",
    );
    let missing = unexported(&report, &names);
    assert!(
        missing.contains(&"alert \"Misspelt\": foothold_controller_leaders".to_owned()),
        "{missing:?}"
    );
    assert!(
        !missing
            .iter()
            .any(|m| m.ends_with("foothold_http_request_duration_seconds_bucket")),
        "a histogram's buckets are exported: {missing:?}"
    );
}
