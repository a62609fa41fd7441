//! A `Software` on the workload cluster `metal3_provisioning_bpa.rs` made: installed by the BPA's package
//! installer Job, then updated to a second version of its package with a drain first.

use std::path::Path;
use std::time::{Duration, Instant};

use foothold_e2e::native_site::{wait_for, Site, APPLIANCE};
use foothold_e2e::netns::Namespace;
use foothold_e2e::upload_hello_packages;

/// A `Software` on the cluster `c1`: a Debian package for the master and a binary for both, uploaded to the
/// appliance's agent on the provisioning network (the test's curl in the namespace `ns`, with the appliance's
/// token, verified with the site CA); the BPA's package installer Job, run on the appliance's own node, takes
/// it `Installed` through the Provisioning's inventory, each host `Updated`. Then a second version of the
/// package, uploaded as a versioned record and asked with a drain: the master (the only host with it) is
/// drained, updated and uncordoned, the worker left `Unchanged`. Checked on the hosts over SSH (`on`: the
/// master's and the worker's commands): the package on the master only, at its new version, the binary on both.
pub(super) fn installs_software(
    site: &Site,
    ns: &Namespace,
    dir: &Path,
    on: [&dyn Fn(&str) -> String; 2],
) {
    let base = format!("https://{APPLIANCE}:5000");
    let ca = site.root.join("etc/foothold/tls/ca.pem");
    let token = std::fs::read_to_string(site.root.join("etc/foothold/token")).unwrap();
    upload_hello_packages(&|| ns.command("curl"), (&base, &ca, token.trim()), dir);
    let started = Instant::now();
    let software = |path: &str| software(site, path);
    let installed = |g: u32| installed(site, &|generation, _| generation == g.to_string());
    apply(site, serde_json::json!("hello-foothold"));
    installed(1);
    foothold_e2e::say!(
        "metal3_provisioning: the Software installed in {} s",
        started.elapsed().as_secs()
    );
    // Each host's report, from the installer's last words: both got something new.
    let hosts = || software("{range .status.hosts[*]}{.name}={.state} {end}");
    assert_eq!(
        hosts(),
        "master-0=Updated worker-0=Updated ",
        "{}",
        software("{.status}")
    );
    let [master, worker] = on;
    assert_eq!(
        master("dpkg-query -W -f '${Status} ${Version}' hello-foothold; echo; hello-tool"),
        "install ok installed 1.0\nhello-tool 1\n"
    );
    let tool = worker("hello-tool; dpkg-query -W hello-foothold 2>&1 || true");
    assert!(tool.starts_with("hello-tool 1\n"), "{tool}");
    assert!(
        tool.contains("no packages found matching hello-foothold"),
        "{tool}"
    );

    let started = Instant::now();
    let second = foothold_e2e::build_deb(dir, "hello-foothold", "1.1");
    foothold_e2e::upload_record_with(
        &|| ns.command("curl"),
        &base,
        &ca,
        token.trim(),
        (("foothold", "c1"), "binary_images"),
        &second,
        "hello-foothold-1.1",
    );
    apply(site, second_version());
    installed(2);
    foothold_e2e::say!(
        "metal3_provisioning: the second version installed, the master drained first, in {} s",
        started.elapsed().as_secs()
    );
    assert_eq!(
        hosts(),
        "master-0=Updated worker-0=Unchanged ",
        "{}",
        software("{.status}")
    );
    let detail = software("{.status.hosts[?(@.name==\"master-0\")].detail}");
    let steps = [
        "drained, ",
        "deb hello-foothold 1.1 installed",
        "uncordoned",
    ];
    let at: Vec<Option<usize>> = steps.iter().map(|s| detail.find(s)).collect();
    assert!(
        at.iter().all(Option::is_some) && at.windows(2).all(|w| w[0] < w[1]),
        "the master's report, in this order: {steps:?}: {detail}"
    );
    assert_eq!(
        master("dpkg-query -W -f '${Status} ${Version}' hello-foothold; echo; hello-tool"),
        "install ok installed 1.1\nhello-tool 1\n"
    );
}

/// The master's package at its second version, drained for it.
fn second_version() -> serde_json::Value {
    serde_json::json!({"hello-foothold": {"version": "1.1", "drain": true}})
}

/// The Software `tools` of the cluster `c1`: `master` and the binary for the masters, the binary for the workers.
fn apply(site: &Site, master: serde_json::Value) {
    site.kubectl_apply(
        &serde_json::json!({
            "apiVersion": "bpa.akraino.org/v1alpha1", "kind": "Software",
            "metadata": {"name": "tools", "namespace": "default", "labels": {"cluster": "c1"}},
            "spec": {"masterSoftware": [master, "hello-tool"], "workerSoftware": ["hello-tool"]},
        })
        .to_string(),
    );
}

/// The Software `tools`'s `path` (a jsonpath), empty while it cannot be read.
fn software(site: &Site, path: &str) -> String {
    site.kubectl(&[
        "get",
        "software",
        "tools",
        "-o",
        &format!("jsonpath={path}"),
    ])
    .unwrap_or_default()
}

/// Waits for the run `run(observed generation, Job name)` picks to end, and asserts it ended `Installed`.
fn installed(site: &Site, run: &dyn Fn(&str, &str) -> bool) {
    let phase = wait_for("the Software", Duration::from_secs(900), || {
        // One read: a phase read apart from its generation may be the status before the one it went with.
        let seen = software(
            site,
            "{.status.observedGeneration} {.status.jobName} {.status.phase}",
        );
        let mut words = seen.splitn(3, ' ');
        let (generation, job, phase) = (
            words.next().unwrap_or_default(),
            words.next().unwrap_or_default(),
            words.next().unwrap_or_default().to_owned(),
        );
        let done = run(generation, job) && ["Installed", "Failed"].contains(&phase.as_str());
        let now = format!(
            "{job} {phase}: {}",
            software(site, "{.status.conditions[*].message}")
        );
        (now, done.then_some(phase))
    });
    assert_eq!(
        phase,
        "Installed",
        "{}\n{}",
        software(site, "{.status}"),
        site.kubectl(&[
            "logs",
            &format!("job/{}", software(site, "{.status.jobName}")),
            "--tail=100"
        ])
        .unwrap_or_else(|e| e)
    );
}

/// The Software as it last was, applied again while the worker is out of the cluster: its run installs on the
/// master alone, which has it all (`Unchanged`). Returns its Job's name.
pub(super) fn applied_again(site: &Site) -> String {
    apply(site, second_version());
    installed(site, &|generation, _| generation == "1");
    assert_eq!(
        software(site, "{range .status.hosts[*]}{.name}={.state} {end}"),
        "master-0=Unchanged ",
        "{}",
        software(site, "{.status}")
    );
    software(site, "{.status.jobName}")
}

/// The Software's run for the cluster with the worker back in it (a Job other than `before`, its run on the
/// master alone), the worker without the Software's binary: installed on the worker (`Updated`, the binary
/// there again), the master `Unchanged`. `on_worker` runs a command on the worker.
pub(super) fn follows_the_cluster(site: &Site, before: &str, on_worker: &dyn Fn(&str) -> String) {
    let started = Instant::now();
    installed(site, &|_, job| !job.is_empty() && job != before);
    foothold_e2e::say!(
        "metal3_provisioning: the Software installed on the cluster with the worker back {} s after it was Ready",
        started.elapsed().as_secs()
    );
    // The report's order: what an operator must see first (an update before what stayed as it was).
    assert_eq!(
        software(site, "{range .status.hosts[*]}{.name}={.state} {end}"),
        "worker-0=Updated master-0=Unchanged ",
        "{}",
        software(site, "{.status}")
    );
    let tool = on_worker("hello-tool");
    assert_eq!(
        tool, "hello-tool 1\n",
        "the Software's binary on the worker again"
    );
}
