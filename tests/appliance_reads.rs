//! What the appliance test reads of the booted appliance beyond SSH: its agent's `/metrics` and a pod's end.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use foothold_e2e::run;

use super::{wait_for, Appliance};

impl Appliance {
    /// The agent's `/metrics`, through the forward (not verified: this host's clock is not always the
    /// appliance's).
    pub(super) fn metrics(&self) -> String {
        run(Command::new("curl").args([
            "-kfsS",
            "--max-time",
            "30",
            &format!("https://127.0.0.1:{}/metrics", self.agent_port),
        ]))
    }

    /// The agent's count of `method` requests for manifests answered 200: containerd GETs an image it lacks, and
    /// asks by HEAD whether a tag still names one it holds.
    pub(super) fn manifest_requests(&self, method: &str) -> u64 {
        let route = "foothold_http_requests_total{route=\"manifest\",method=\"";
        let line = format!("{route}{method}\",status=\"200\"}}");
        self.metrics()
            .lines()
            .filter(|l| l.starts_with(&line))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum()
    }

    /// Applies the pod `json` (written into `dir`) named `name` and waits up to 10 minutes for it to end; its
    /// phase, `Succeeded` or `Failed`.
    pub(super) fn run_pod(&self, dir: &Path, name: &str, json: &str) -> String {
        let file = dir.join(format!("{name}.json"));
        std::fs::write(&file, json).unwrap();
        self.kubectl(&["apply", "-f", file.to_str().unwrap()])
            .unwrap();
        wait_for(
            &format!("the pod {name} to finish"),
            Duration::from_secs(600),
            || {
                let p = self.kubectl(&["get", "pod", name, "-o", "jsonpath={.status.phase}"])?;
                matches!(p.as_str(), "Succeeded" | "Failed")
                    .then_some(p.clone())
                    .ok_or(p)
            },
        )
    }
}
