//! `foothold-soak`: the agent under load while it is SIGKILLed and restarted at random (`scripts/soak.sh`).
//!
//! Clients (threads, each with its own repository and records) push blobs and manifests through the registry,
//! pull back what they were acknowledged, and upload REST images resumably in chunks, resuming from the
//! record's offset after every failure. A supervisor kills the agent every few seconds to a minute and starts it
//! again on the same port and data, sampling its memory. At the end the agent is stopped, `fsck` must be clean,
//! and a fresh agent must serve every blob, tag and image any client was acknowledged, byte for byte. Traffic
//! stays on 127.0.0.1; the run is bounded by `--minutes`.

use std::collections::BTreeMap;
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use sha2::{Digest as _, Sha256};

const TOKEN: &str = "soak-token";

struct Args {
    agent: PathBuf,
    data: PathBuf,
    minutes: u64,
    clients: usize,
    seed: u64,
}

fn args() -> Args {
    let mut a = Args {
        agent: PathBuf::from("target/release/foothold-agent"),
        data: std::env::temp_dir().join(format!("foothold-soak-{}", std::process::id())),
        minutes: 30,
        clients: 200,
        seed: 1,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it
            .next()
            .unwrap_or_else(|| usage(&format!("{flag} needs a value")));
        let number = || {
            value
                .parse::<u64>()
                .unwrap_or_else(|_| usage(&format!("{flag} {value:?} is not a number")))
        };
        match flag.as_str() {
            "--agent" => a.agent = PathBuf::from(&value),
            "--data" => a.data = PathBuf::from(&value),
            "--minutes" => a.minutes = number(),
            "--clients" => a.clients = number() as usize,
            "--seed" => a.seed = number(),
            _ => usage(&format!("unknown argument {flag}")),
        }
    }
    a
}

fn usage(why: &str) -> ! {
    eprintln!("foothold-soak: {why}\nusage: foothold-soak [--agent BIN] [--data DIR] [--minutes N] [--clients N] [--seed N]");
    std::process::exit(2)
}

fn sha256(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// What clients were told is stored: blob digests, image record → sha256, and per tag the last manifest
/// acknowledged plus the pushes tried after it (one whose answer a kill cut off may have landed).
#[derive(Default)]
struct Acknowledged {
    blobs: BTreeMap<String, String>,
    tags: BTreeMap<(String, String), (Option<String>, Vec<String>)>,
    images: BTreeMap<String, String>,
}

struct Stats {
    ops: AtomicU64,
    failures: AtomicU64,
    kills: AtomicU64,
    max_rss_kib: AtomicU64,
}

/// The agent process, restarted in place by the supervisor.
struct AgentProc {
    bin: PathBuf,
    data: PathBuf,
    port: u16,
    child: Option<Child>,
}

impl AgentProc {
    fn start(&mut self) {
        let token = self.data.with_extension("token");
        std::fs::write(&token, TOKEN).expect("writing the token file");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.data.with_extension("log"))
            .expect("opening the agent log");
        let child = Command::new(&self.bin)
            .args(["serve", "--no-controllers", "--listen"])
            .arg(format!("127.0.0.1:{}", self.port))
            .arg("--data")
            .arg(&self.data)
            .arg("--token-file")
            .arg(&token)
            .env("FOOTHOLD_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", self.bin.display()));
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(60);
        while http()
            .get(&format!("http://127.0.0.1:{}/healthz", self.port))
            .call()
            .is_err()
        {
            assert!(
                Instant::now() < deadline,
                "the agent did not come up in 60 s"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn rss_kib(&self) -> Option<u64> {
        let pid = self.child.as_ref()?.id();
        std::fs::read_to_string(format!("/proc/{pid}/status"))
            .ok()?
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    }
}

fn http() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(60)))
        .build()
        .into()
}

/// One client's loop until `stop`: its own repository `soak/c<i>` and records `c<i>-<n>`.
fn client(
    i: usize,
    base: String,
    seed: u64,
    stop: Arc<AtomicBool>,
    acked: Arc<Mutex<Acknowledged>>,
    stats: Arc<Stats>,
) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ (i as u64).wrapping_mul(0x9e37));
    let http = http();
    let auth = format!("Bearer {TOKEN}");
    let repo = format!("soak/c{i}");
    let mut mine: Vec<(String, usize)> = Vec::new();
    let mut images: Vec<String> = Vec::new();
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        let ok = match rng.random_range(0..10) {
            // Push a blob (1–64 KiB) monolithically.
            0..=3 => {
                let mut blob = vec![0u8; rng.random_range(1024..64 * 1024)];
                rng.fill(&mut blob[..]);
                let d = sha256(&blob);
                let r = http
                    .post(&format!("{base}/v2/{repo}/blobs/uploads/?digest={d}"))
                    .header("Authorization", &auth)
                    .header("Content-Type", "application/octet-stream")
                    .send(&blob[..]);
                let ok = r.as_ref().is_ok_and(|r| r.status() == 201);
                if ok {
                    acked.lock().unwrap().blobs.insert(d.clone(), repo.clone());
                    mine.push((d, blob.len()));
                }
                ok
            }
            // Tag a manifest over some acknowledged blobs.
            4..=5 if mine.len() >= 2 => {
                let config = &mine[rng.random_range(0..mine.len())];
                let layer = &mine[rng.random_range(0..mine.len())];
                let manifest = serde_json::json!({
                    "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config.0, "size": config.1},
                    "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": layer.0, "size": layer.1}],
                })
                .to_string();
                let tag = format!("t{}", rng.random_range(0..4));
                let digest = sha256(manifest.as_bytes());
                acked
                    .lock()
                    .unwrap()
                    .tags
                    .entry((repo.clone(), tag.clone()))
                    .or_default()
                    .1
                    .push(digest.clone());
                let r = http
                    .put(&format!("{base}/v2/{repo}/manifests/{tag}"))
                    .header("Authorization", &auth)
                    .header("Content-Type", "application/vnd.oci.image.manifest.v1+json")
                    .send(manifest.as_bytes());
                let ok = r.as_ref().is_ok_and(|r| r.status() == 201);
                if ok {
                    let mut a = acked.lock().unwrap();
                    let entry = a.tags.entry((repo.clone(), tag)).or_default();
                    *entry = (Some(digest), Vec::new());
                }
                ok
            }
            // Pull an acknowledged blob and check it.
            6..=7 if !mine.is_empty() => {
                let (d, _) = &mine[rng.random_range(0..mine.len())];
                match http.get(&format!("{base}/v2/{repo}/blobs/{d}")).call() {
                    Ok(r) if r.status() == 200 => {
                        let body = r.into_body().with_config().limit(1 << 20).read_to_vec();
                        match body {
                            Ok(b) => {
                                assert_eq!(
                                    &sha256(&b),
                                    d,
                                    "client {i}: pulled {d} and got other bytes"
                                );
                                true
                            }
                            Err(_) => false, // cut off by a kill
                        }
                    }
                    Ok(r) => panic!("client {i}: acknowledged blob {d} answered {}", r.status()),
                    Err(_) => false,
                }
            }
            // A REST image of 128 KiB–1 MiB in 128 KiB chunks, resumed from the record's offset after any
            // failure; a client keeps its last four (the disk is bounded), deleting the oldest.
            _ => {
                let name = format!("c{i}-{n}");
                let ok = upload_image(&http, &base, &auth, &name, &mut rng, &acked);
                if ok {
                    images.push(name);
                }
                if images.len() > 4 {
                    let old = images.remove(0);
                    // No longer vouched for from here: the delete may land even if its answer is lost.
                    acked.lock().unwrap().images.remove(&old);
                    let _ = http
                        .delete(&format!(
                            "{base}/v1/baremetalcluster/soak/site/os_images/{old}"
                        ))
                        .header("Authorization", &auth)
                        .call();
                }
                ok
            }
        };
        stats.ops.fetch_add(1, Ordering::Relaxed);
        if !ok {
            stats.failures.fetch_add(1, Ordering::Relaxed);
            std::thread::sleep(Duration::from_millis(rng.random_range(50..300)));
        }
    }
}

fn upload_image(
    http: &ureq::Agent,
    base: &str,
    auth: &str,
    name: &str,
    rng: &mut impl Rng,
    acked: &Mutex<Acknowledged>,
) -> bool {
    let mut content = vec![0u8; rng.random_range(128 << 10..1 << 20)];
    rng.fill(&mut content[..]);
    let sha = hex::encode(Sha256::digest(&content));
    let records = format!("{base}/v1/baremetalcluster/soak/site/os_images");
    let deadline = Instant::now() + Duration::from_secs(300);
    let mut created = false;
    while Instant::now() < deadline {
        if !created {
            let r = http
                .post(&records)
                .header("Authorization", auth)
                .header("Content-Type", "application/json")
                .send(
                    serde_json::json!({"image_name": name, "image_length": content.len(), "sha256": sha})
                        .to_string(),
                );
            match r {
                Ok(r) if r.status() == 201 || r.status() == 409 => created = true,
                _ => {
                    std::thread::sleep(Duration::from_millis(200));
                    continue;
                }
            }
        }
        let record = match http.get(&format!("{records}/{name}")).call() {
            Ok(r) if r.status() == 200 => r
                .into_body()
                .read_json::<serde_json::Value>()
                .unwrap_or_default(),
            _ => {
                std::thread::sleep(Duration::from_millis(200));
                continue;
            }
        };
        if record["upload_complete"] == true {
            acked.lock().unwrap().images.insert(name.to_owned(), sha);
            return true;
        }
        let Some(offset) = record["image_offset"].as_u64() else {
            continue;
        };
        let end = (offset as usize + 128 * 1024).min(content.len());
        let _ = http
            .patch(&format!("{records}/{name}"))
            .header("Authorization", auth)
            .header("Upload-Offset", &offset.to_string())
            .send(&content[offset as usize..end]);
    }
    false
}

/// Every acknowledged blob in `blobs`, checked by `threads` clients at once.
fn verify_blobs(base: &str, blobs: &BTreeMap<String, String>, threads: usize) -> Vec<String> {
    let all: Vec<(&String, &String)> = blobs.iter().collect();
    let per = all.len().div_ceil(threads).max(1);
    std::thread::scope(|scope| {
        let workers: Vec<_> = all
            .chunks(per)
            .map(|part| {
                scope.spawn(move || {
                    let http = http();
                    let mut problems = Vec::new();
                    for (d, repo) in part {
                        match http.get(&format!("{base}/v2/{repo}/blobs/{d}")).call() {
                            Ok(r) if r.status() == 200 => {
                                let mut b = Vec::new();
                                let _ = r.into_body().into_reader().read_to_end(&mut b);
                                if &sha256(&b) != *d {
                                    problems.push(format!("blob {d} in {repo} is corrupt"));
                                }
                            }
                            other => problems.push(format!(
                                "blob {d} in {repo} lost: {:?}",
                                other.map(|r| r.status())
                            )),
                        }
                    }
                    problems
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().expect("a verifier thread"))
            .collect()
    })
}

fn verify(base: &str, acked: &Acknowledged) -> Vec<String> {
    let http = http();
    let mut problems = verify_blobs(base, &acked.blobs, 16);
    for ((repo, tag), (acknowledged, tried)) in &acked.tags {
        let Some(want) = acknowledged else {
            continue;
        };
        let r = http
            .head(&format!("{base}/v2/{repo}/manifests/{tag}"))
            .header("Accept", "application/vnd.oci.image.manifest.v1+json")
            .call();
        let got = r.ok().and_then(|r| {
            r.headers()
                .get("docker-content-digest")?
                .to_str()
                .ok()
                .map(str::to_owned)
        });
        // The last acknowledged push, or one tried after it whose answer was cut off.
        if got.as_ref().is_none_or(|g| g != want && !tried.contains(g)) {
            problems.push(format!(
                "{repo}:{tag} is {got:?}, the last acknowledged push was {want}"
            ));
        }
    }
    for (name, sha) in &acked.images {
        let url = format!("{base}/files/soak/site/os_images/{name}");
        match http.get(&url).call() {
            Ok(r) if r.status() == 200 => {
                let mut b = Vec::new();
                let _ = r.into_body().into_reader().read_to_end(&mut b);
                if hex::encode(Sha256::digest(&b)) != *sha {
                    problems.push(format!("image {name} is corrupt"));
                }
            }
            other => problems.push(format!(
                "image {name} lost: {:?}",
                other.map(|r| r.status())
            )),
        }
    }
    problems
}

fn fsck(bin: &Path, data: &Path) -> Result<String, String> {
    let out = Command::new(bin)
        .args(["fsck", "--data"])
        .arg(data)
        .output()
        .map_err(|e| e.to_string())?;
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    if out.status.success() {
        Ok(text)
    } else {
        Err(text)
    }
}

fn main() {
    let a = args();
    let _ = std::fs::remove_dir_all(&a.data);
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let base = format!("http://127.0.0.1:{port}");
    let mut agent = AgentProc {
        bin: a.agent.clone(),
        data: a.data.clone(),
        port,
        child: None,
    };
    agent.start();
    let stop = Arc::new(AtomicBool::new(false));
    let acked = Arc::new(Mutex::new(Acknowledged::default()));
    let stats = Arc::new(Stats {
        ops: AtomicU64::new(0),
        failures: AtomicU64::new(0),
        kills: AtomicU64::new(0),
        max_rss_kib: AtomicU64::new(0),
    });
    let clients: Vec<_> = (0..a.clients)
        .map(|i| {
            let (base, stop, acked, stats) =
                (base.clone(), stop.clone(), acked.clone(), stats.clone());
            std::thread::Builder::new()
                .stack_size(256 * 1024)
                .spawn(move || client(i, base, a.seed, stop, acked, stats))
                .expect("a client thread")
        })
        .collect();
    let mut rng = rand::rngs::StdRng::seed_from_u64(a.seed);
    let started = Instant::now();
    let end = started + Duration::from_secs(a.minutes * 60);
    while Instant::now() < end {
        // 5–55 s up, sampling memory every half second, then SIGKILL and start again.
        let up_until = Instant::now() + Duration::from_millis(rng.random_range(5_000..55_000));
        while Instant::now() < up_until.min(end) {
            if let Some(rss) = agent.rss_kib() {
                stats.max_rss_kib.fetch_max(rss, Ordering::Relaxed);
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        if Instant::now() >= end {
            break;
        }
        agent.kill();
        stats.kills.fetch_add(1, Ordering::Relaxed);
        agent.start();
        eprintln!(
            "soak: {:>5} s, {} kills, {} operations ({} failed and retried), max RSS {} MiB",
            started.elapsed().as_secs(),
            stats.kills.load(Ordering::Relaxed),
            stats.ops.load(Ordering::Relaxed),
            stats.failures.load(Ordering::Relaxed),
            stats.max_rss_kib.load(Ordering::Relaxed) / 1024
        );
    }
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        if c.join().is_err() {
            agent.kill();
            eprintln!("soak: a client found a wrong answer (above)");
            std::process::exit(1);
        }
    }
    agent.kill();
    let fsck_report = fsck(&a.agent, &a.data);
    agent.start();
    let acked = acked.lock().unwrap();
    let problems = verify(&base, &acked);
    agent.kill();
    println!(
        "soak: {} min, {} clients, {} kill/restart cycles, {} operations ({} failed and retried), \
         acknowledged {} blobs, {} tags, {} images; max agent RSS {} MiB",
        a.minutes,
        a.clients,
        stats.kills.load(Ordering::Relaxed),
        stats.ops.load(Ordering::Relaxed),
        stats.failures.load(Ordering::Relaxed),
        acked.blobs.len(),
        acked.tags.len(),
        acked.images.len(),
        stats.max_rss_kib.load(Ordering::Relaxed) / 1024
    );
    match fsck_report {
        Ok(r) => println!("soak: fsck: {}", r.trim()),
        Err(r) => {
            println!("soak: fsck found problems:\n{r}");
            std::process::exit(1);
        }
    }
    if !problems.is_empty() {
        println!(
            "soak: {} acknowledged items lost or corrupt:",
            problems.len()
        );
        for p in problems.iter().take(50) {
            println!("  {p}");
        }
        std::process::exit(1);
    }
    println!("soak: every acknowledged blob, tag and image is served intact");
    let _ = std::fs::remove_dir_all(&a.data);
}
