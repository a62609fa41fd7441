//! Issue 46's per-node benchmark on the site `metal3_provisioning.rs` makes (`scripts/bench-metal3-nodes.sh`
//! runs it): with `FOOTHOLD_BENCH_NODES=<file>`, once both hosts are available the test gives both the node
//! image at once (no wrong checksum first), waits for each to boot from its disk and be ready, writes where each
//! node's time went to `<file>` and ends there. The phases come from Ironic's log (its provision states: the
//! ramdisk's inventory arriving ends `inspect wait`, so the ramdisk's boot and its hardware collection are one
//! phase) and the node's console (its ready marker after `active`); nothing is asserted of them.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use foothold_e2e::native_site::{patch_host, wait_for_hosts, Site};

use super::nodes::Node;

/// Where the benchmark's table goes, when one was asked for.
pub(super) fn asked() -> Option<PathBuf> {
    std::env::var_os("FOOTHOLD_BENCH_NODES")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// Both hosts given `image` (the node image's spec) and their user data at once; each waited for until ready
/// on its disk; the table written to `out`. `registered`: when the BareMetalHosts were applied. The master's
/// network data is the test's (its static address). `ironic_log`: the site's Ironic's log.
pub(super) fn both_nodes(
    (site, ironic_log): (&Site, &Path),
    nodes: &[Node],
    image: &serde_json::Value,
    registered: Instant,
    out: &Path,
) {
    let registered = SystemTime::now() - registered.elapsed();
    let image_set = SystemTime::now();
    for (i, n) in nodes.iter().enumerate() {
        let mut spec = serde_json::json!({
            "image": image,
            "userData": {"name": format!("user-data-{}", n.name), "namespace": "default"},
        });
        if i == 0 {
            spec["networkData"] =
                serde_json::json!({"name": "network-data-master", "namespace": "default"});
        }
        patch_host(site, n.name, spec);
    }
    // Each console is watched by a thread of its own, so each node's ready time is its own.
    let ready: Vec<SystemTime> = std::thread::scope(|s| {
        let waits: Vec<_> = nodes
            .iter()
            .map(|n| {
                s.spawn(move || {
                    foothold_e2e::wait_for_marker(&n.console, Duration::from_secs(1800));
                    SystemTime::now()
                })
            })
            .collect();
        waits.into_iter().map(|w| w.join().unwrap()).collect()
    });
    let names: Vec<(&str, &str)> = nodes.iter().map(|n| (n.name, "provisioned")).collect();
    let hosts = wait_for_hosts(site, &names, Duration::from_secs(60));
    let log = std::fs::read_to_string(ironic_log).unwrap_or_default();
    let mut table = String::from(
        "node\tramdisk boot and inventory\tinspection\tcleaning\tavailable to deploying\tdeploy\t\
         first boot\tcreated to ready\tof the 8 min target\n",
    );
    for ((n, host), ready) in nodes.iter().zip(&hosts).zip(&ready) {
        let uuid = host["status"]["provisioning"]["ID"]
            .as_str()
            .unwrap_or_default();
        let p = Phases::of(&log, uuid);
        let at = |t: Option<f64>| t.unwrap_or(f64::NAN);
        let ready = epoch(*ready);
        let span = |a: Option<f64>, b: Option<f64>| format!("{:.0}", at(b) - at(a));
        let total = ready - epoch(registered);
        let _ = writeln!(
            table,
            "{}\t{}\t{}\t{}\t{}\t{}\t{:.0}\t{total:.0}\t{:.2}",
            n.name,
            span(p.inspect_wait, p.inventory),
            span(p.inventory, p.inspected),
            span(p.cleaning, p.available),
            span(p.available, p.deploying),
            span(p.deploying, p.active),
            ready - at(p.active),
            total / 480.0,
        );
    }
    let _ = writeln!(
        table,
        "# seconds; the image set {:.0} s after the hosts were registered",
        epoch(image_set) - epoch(registered)
    );
    std::fs::write(out, &table).unwrap_or_else(|e| panic!("{}: {e}", out.display()));
    foothold_e2e::say!("metal3_provisioning: per-node benchmark:\n{table}");
}

fn epoch(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64()
}

/// When one Ironic node passed the points the benchmark's phases run between (seconds since the epoch, UTC).
#[derive(Debug, Default, PartialEq)]
struct Phases {
    inspect_wait: Option<f64>,
    inventory: Option<f64>,
    inspected: Option<f64>,
    cleaning: Option<f64>,
    available: Option<f64>,
    deploying: Option<f64>,
    active: Option<f64>,
}

impl Phases {
    /// The first time each point is seen in Ironic's log `log` for the node `uuid`: its provision states, and
    /// the end of its inspection (the ramdisk's inventory arrives with its move from `inspect wait` back to
    /// `inspecting`, the processing ends with "Successfully finished inspection").
    fn of(log: &str, uuid: &str) -> Phases {
        let mut p = Phases::default();
        for line in log.lines() {
            let Some(t) = time(line) else { continue };
            let first = |slot: &mut Option<f64>| {
                slot.get_or_insert(t);
            };
            let moved = |state: &str| {
                line.contains(uuid)
                    && line.contains(&format!("moved to provision state \"{state}\""))
            };
            if moved("inspect wait") {
                first(&mut p.inspect_wait);
            } else if moved("inspecting") && line.contains("from state \"inspect wait\"") {
                first(&mut p.inventory);
            } else if moved("cleaning") && p.inspected.is_some() {
                first(&mut p.cleaning);
            } else if moved("available") {
                first(&mut p.available);
            } else if moved("deploying") {
                first(&mut p.deploying);
            } else if moved("active") {
                first(&mut p.active);
            } else if line.contains(uuid) && line.contains("Successfully finished inspection") {
                first(&mut p.inspected);
            }
        }
        p
    }
}

/// The UTC time at the start of an oslo.log line (`2026-12-02 10:01:02.345 …`), as seconds since the epoch.
fn time(line: &str) -> Option<f64> {
    let (date, rest) = line.get(..10).zip(line.get(11..23))?;
    let num = |s: &str| s.parse::<i64>().ok();
    let mut d = date.split('-').map(num);
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let mut c = rest.split([':', '.']).map(num);
    let (h, min, s, ms) = (c.next()??, c.next()??, c.next()??, c.next()??);
    if !(1..=12).contains(&m) || !(1..=31).contains(&day) || h > 23 || min > 59 || s > 60 {
        return None;
    }
    // Days from 1970-01-01 to the date (the proleptic Gregorian calendar; Howard Hinnant's days_from_civil).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some((days * 86_400 + h * 3600 + min * 60 + s) as f64 + ms as f64 / 1000.0)
}

#[test]
fn oslo_times_are_read_as_utc_seconds() {
    assert_eq!(time("1970-01-01 00:00:01.500 7 INFO x"), Some(1.5));
    // 2026-12-02 10:01:02 UTC is 1,796,205,662 s after the epoch (date -u -d '2026-12-02 10:01:02' +%s).
    assert_eq!(
        time("2026-12-02 10:01:02.000 123 INFO ironic"),
        Some(1_796_205_662.0)
    );
    assert_eq!(time("2024-02-29 00:00:00.000 x"), Some(1_709_164_800.0));
    assert_eq!(time("Traceback (most recent call last):"), None);
    assert_eq!(time("2026-13-02 10:01:02.000 x"), None);
}

#[test]
fn a_nodes_phases_are_read_from_ironics_log() {
    let (a, b) = (
        "552e49e1-1c12-4816-80f5-e9b051161a3f",
        "c0363a1a-d190-4c35-9d51-1d2c1a7e7d10",
    );
    // As Ironic 29 logs them (ironic.conductor.task_manager, ironic.conductor.inspection).
    let moved = |t: &str, n: &str, s: &str, from: &str| {
        format!("2026-12-02 10:00:{t}.000 281 INFO ironic.conductor.task_manager [None req-1 metal3 - - - - -] Node {n} moved to provision state \"{s}\" from state \"{from}\"; target provision state is \"manageable\"\n")
    };
    let log = [
        moved("00", a, "cleaning", "manageable"), // before inspection: not the cleaning phase
        moved("01", a, "inspecting", "manageable"),
        moved("02", a, "inspect wait", "inspecting"),
        moved("03", b, "inspect wait", "inspecting"),
        moved("10", a, "inspecting", "inspect wait"),
        "2026-12-02 10:00:11.000 281 INFO ironic.conductor.inspection [None req-2 - - - - - -] Successfully finished inspection of node 552e49e1-1c12-4816-80f5-e9b051161a3f\n".into(),
        moved("21", a, "cleaning", "manageable"),
        moved("30", a, "available", "cleaning"),
        moved("40", a, "deploying", "available"),
        moved("50", a, "active", "deploying"),
        moved("55", a, "deploying", "active"),
    ]
    .concat();
    let t = |s: f64| Some(1_796_205_600.0 + s);
    assert_eq!(
        Phases::of(&log, a),
        Phases {
            inspect_wait: t(2.0),
            inventory: t(10.0),
            inspected: t(11.0),
            cleaning: t(21.0),
            available: t(30.0),
            deploying: t(40.0),
            active: t(50.0),
        }
    );
    let other = Phases::of(&log, b);
    assert_eq!((other.inspect_wait, other.inventory), (t(3.0), None));
}
