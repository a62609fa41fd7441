//! The fetch phase: every `url` input of a spec into a content-addressed cache (`<cache>/files/sha256/<hex>`),
//! verified against its pinned sha256 while it streams, resumed with a Range request after an interruption,
//! several at a time. A cache hit makes no network request at all. Inputs built from source (`go`, `cc`) are
//! built into the same cache, one at a time, and checked against their pins the same way.

use std::fs::{self, File};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _, Result};

use crate::progress::{Bytes, Progress};
use crate::spec::Loaded;

/// Where the content with sha256 `hex` lives in the cache.
pub fn cached(cache: &Path, hex: &str) -> PathBuf {
    cache.join("files/sha256").join(hex)
}

/// What fetching one input did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fetched {
    /// Already in the cache: no request made.
    Cached,
    /// Downloaded, resuming after `resumed_from` bytes already on disk.
    Downloaded { bytes: u64, resumed_from: u64 },
    /// Built here from source, in this run (what from, which toolchain).
    Built(BuildRecord),
    /// An input built from source, taken from the cache: how it got there, if a build of this cache's left a
    /// record (none when it was placed by hand or unpacked from elsewhere).
    CachedBuild(Option<BuildRecord>),
}

impl Fetched {
    /// Says on `progress` what fetching `input` (the spec's `field`) did.
    pub fn report(&self, progress: &Progress, field: &str, input: &str) {
        let (outcome, record) = match self {
            Fetched::Cached => ("cached", None),
            Fetched::Downloaded { .. } => ("downloaded", None),
            Fetched::Built(r) => ("built", Some(r)),
            Fetched::CachedBuild(r) => ("cached", r.as_ref()),
        };
        let record = record.and_then(|r| serde_json::to_value(r).ok());
        progress.input(field, input, outcome, record, &self.describe());
    }

    /// A line for the operator: what happened to the input, and for one built from source, where and when.
    pub fn describe(&self) -> String {
        match self {
            Fetched::Cached => "in the cache".into(),
            Fetched::Downloaded { bytes, resumed_from: 0 } => format!("downloaded {bytes} bytes"),
            Fetched::Downloaded {
                bytes,
                resumed_from,
            } => format!("downloaded {bytes} bytes, resumed after {resumed_from}"),
            Fetched::Built(r) => format!("built in this run in {} s: {}", r.seconds, r.made),
            Fetched::CachedBuild(Some(r)) => format!(
                "taken from the cache, built {} on {} in {} s: {}",
                r.finished,
                if r.machine == machine_id() {
                    "this machine".to_owned()
                } else {
                    format!("another machine ({})", r.machine)
                },
                r.seconds,
                r.made
            ),
            Fetched::CachedBuild(None) => {
                "taken from the cache with no record of its build (placed there by hand, or from another cache)"
                    .into()
            }
        }
    }
}

/// What a build from source that this cache holds was: kept beside the content as
/// `files/built/<sha256>.json`, so a later run that takes it from the cache can say where and when it was built.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct BuildRecord {
    /// What was built (`k8s.io/kubernetes/cmd/kubelet@v1.35.4`).
    pub reference: String,
    /// From which module version, with which toolchain (the manifest's provenance).
    pub made: String,
    /// `/etc/machine-id` of the machine that built it (its hostname where it has none).
    pub machine: String,
    /// When the build finished (UTC, RFC 3339).
    pub finished: String,
    /// How long it took.
    pub seconds: u64,
}

/// This machine, as build records name it: `/etc/machine-id`, else its hostname.
pub fn machine_id() -> String {
    ["/etc/machine-id", "/proc/sys/kernel/hostname"]
        .iter()
        .find_map(|p| {
            fs::read_to_string(p)
                .ok()
                .map(|s| s.trim().to_owned())
                .filter(|s| !s.is_empty())
        })
        .unwrap_or_else(|| "unknown".into())
}

/// The record a build of content `hex` left in the cache, if any.
pub fn build_record(cache: &Path, hex: &str) -> Option<BuildRecord> {
    let text = fs::read(cache.join("files/built").join(format!("{hex}.json"))).ok()?;
    serde_json::from_slice(&text).ok()
}

/// What the cache says of how content `hex` was built, when it was built here (see `build_source`).
pub fn provenance(cache: &Path, hex: &str) -> Option<String> {
    fs::read_to_string(cache.join("files/built").join(format!("{hex}.txt")))
        .ok()
        .map(|s| s.trim().to_owned())
}

/// Builds `recipe` into the cache and returns its sha256; with `pin`, the result must have that sha256 and
/// nothing is cached otherwise. A cache hit for `pin` builds nothing.
pub fn build_source(
    cache: &Path,
    recipe: &crate::source::Recipe,
    pin: Option<&str>,
) -> Result<(String, Fetched)> {
    if let Some(hex) = pin {
        if cached(cache, hex).is_file() {
            return Ok((
                hex.to_owned(),
                Fetched::CachedBuild(build_record(cache, hex)),
            ));
        }
    }
    let started = std::time::Instant::now();
    let dir = cache.join("files/sha256");
    fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let reference = recipe.reference();
    let work = cache.join("go/work").join(
        reference
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect::<String>(),
    );
    let tmp = tempfile::Builder::new()
        .prefix(".built-")
        .tempfile_in(&dir)
        .with_context(|| format!("creating a file in {}", dir.display()))?
        .into_temp_path();
    let made = match recipe {
        crate::source::Recipe::Archive(a) => crate::go_archive::build(a, &work, &tmp)?,
        _ => crate::source::build(recipe, &work, &tmp)?,
    };
    let hex = crate::sparse::sha256(&tmp)?;
    if let Some(want) = pin {
        if want != hex {
            bail!(
                "{reference} {made} has sha256 {hex}, the spec pins {want}; nothing was cached (another toolchain \
                 builds other bytes: if you trust this one, `foothold-build pin --update` pins what it built)"
            );
        }
    }
    let built = cache.join("files/built");
    fs::create_dir_all(&built)?;
    let note = built.join(format!("{hex}.txt"));
    fs::write(note.with_extension("tmp"), format!("{reference} {made}\n"))?;
    crate::files::publish(&note.with_extension("tmp"), &note)?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let record = BuildRecord {
        reference: reference.clone(),
        made,
        machine: machine_id(),
        finished: chrono::DateTime::from_timestamp(now.as_secs() as i64, 0)
            .unwrap_or_default()
            .format("%Y-%m-%dT%H:%M:%SZ")
            .to_string(),
        seconds: started.elapsed().as_secs(),
    };
    let json = built.join(format!("{hex}.json"));
    fs::write(
        json.with_extension("json.tmp"),
        serde_json::to_vec(&record)?,
    )?;
    crate::files::publish(&json.with_extension("json.tmp"), &json)?;
    let done = cached(cache, &hex);
    crate::files::publish(&tmp, &done)?;
    tmp.keep()?;
    Ok((hex, Fetched::Built(record)))
}

/// Fetches `url` into the cache unless content `hex` is there already.
pub fn fetch_one(cache: &Path, url: &str, hex: &str) -> Result<Fetched> {
    fetch_with_progress(cache, url, hex, None)
}

/// `fetch_one`, with a byte bar on `progress`.
pub fn fetch_with_progress(
    cache: &Path,
    url: &str,
    hex: &str,
    progress: Option<&Progress>,
) -> Result<Fetched> {
    let done = cached(cache, hex);
    if done.is_file() {
        return Ok(Fetched::Cached);
    }
    let dir = done.parent().expect("has a parent");
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut partial = crate::io::Partial::open(&dir.join(format!("{hex}.partial")))?;
    let have = partial.have();
    let mut req = agent().get(url);
    if have > 0 {
        req = req.header("Range", &format!("bytes={have}-"));
    }
    let resp = req.call().with_context(|| format!("GET {url}"))?;
    let resumed = match resp.status().as_u16() {
        206 if have > 0 => true,
        // A full body: start again.
        200 => false,
        416 if have > 0 => {
            // The partial file is already complete (or longer than the content): start again next time.
            partial.file(false)?;
            bail!("GET {url}: the server refused to resume at byte {have} (416); the partial download was emptied, fetch again");
        }
        s => bail!("GET {url}: HTTP {s}"),
    };
    let resumed_from = if resumed { have } else { 0 };
    let mut out = partial.file(resumed)?;
    let bytes = stream(url, resp, &mut partial, &mut out, progress)
        .map_err(|e| anyhow::anyhow!("{e:#}; fetch again to resume"))?;
    drop(out);
    if let Err(got) = partial.finish(hex, &done)? {
        bail!("GET {url}: the content has sha256 {got}, the spec pins {hex}; nothing was cached");
    }
    Ok(Fetched::Downloaded {
        bytes: resumed_from + bytes,
        resumed_from,
    })
}

/// The body's length, when the response says it.
fn content_length(resp: &ureq::http::Response<ureq::Body>) -> Option<u64> {
    resp.headers()
        .get("content-length")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
}

/// The HTTP client of `url` inputs: HTTPS verified against the machine's CA store (the roots apt, curl and go
/// trust there, a TLS-inspecting proxy's included), not a list of its own; the bytes are checked against their
/// pinned sha256 either way.
fn agent() -> ureq::Agent {
    ureq::Agent::new_with_config(
        ureq::config::Config::builder()
            .http_status_as_error(false)
            .timeout_connect(Some(std::time::Duration::from_secs(30)))
            .tls_config(
                ureq::tls::TlsConfig::builder()
                    .root_certs(ureq::tls::RootCerts::PlatformVerifier)
                    .build(),
            )
            .build(),
    )
}

/// Streams a response's body into `out`, the file of `partial` (which holds `partial.have()` bytes already),
/// hashing it; returns the bytes written. A body cut short is an error that names how far it got, with `out`
/// synced.
fn stream(
    url: &str,
    resp: ureq::http::Response<ureq::Body>,
    partial: &mut crate::io::Partial,
    out: &mut File,
    progress: Option<&Progress>,
) -> Result<u64> {
    let have = partial.have();
    let total = content_length(&resp).map(|n| n + have);
    let bar = progress.map_or_else(Bytes::none, |p| p.bytes(url, total));
    bar.set_position(have);
    let mut body = resp.into_body().into_reader();
    let mut buf = vec![0u8; 1 << 20];
    let mut w = partial.writer(out, &bar);
    loop {
        let n = match body.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                let bytes = w.written();
                out.sync_all()?;
                bail!("GET {url}: interrupted after {} bytes ({e})", have + bytes);
            }
        };
        w.write_all(&buf[..n])?;
    }
    let bytes = w.written();
    out.sync_all()?;
    Ok(bytes)
}

/// Downloads `url` whole to learn its sha256, for `pin`, and keeps it in the cache under that hash, so that the
/// fetch that follows makes no request. Returns the hex sha256.
pub fn fetch_unpinned(cache: &Path, url: &str, progress: Option<&Progress>) -> Result<String> {
    let dir = cache.join("files/sha256");
    fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let resp = agent()
        .get(url)
        .call()
        .with_context(|| format!("GET {url}"))?;
    match resp.status().as_u16() {
        200 => {}
        s => bail!("GET {url}: HTTP {s}"),
    }
    // Removed on drop unless published.
    let mut tmp = tempfile::Builder::new()
        .prefix(".pin-")
        .suffix(".partial")
        .tempfile_in(&dir)
        .with_context(|| format!("creating a file in {}", dir.display()))?;
    let total = content_length(&resp);
    let bar = progress.map_or_else(Bytes::none, |p| p.bytes(url, total));
    let mut hasher = crate::io::Hasher::sha256();
    let mut body = resp.into_body().into_reader();
    std::io::copy(
        &mut body,
        &mut crate::io::HashingWriter::new(tmp.as_file_mut(), &mut hasher, &bar),
    )
    .with_context(|| format!("GET {url}"))?;
    tmp.as_file().sync_all()?;
    let hex = hasher.hex();
    let done = cached(cache, &hex);
    if !done.is_file() {
        let tmp = tmp.into_temp_path();
        crate::files::publish(&tmp, &done)?;
        // Already renamed: nothing left to remove.
        tmp.keep()?;
    }
    Ok(hex)
}

/// Fetches every `url` input of the spec, up to `parallel` at a time, then builds every `go` and `cc` input one at
/// a time (each build uses every core). Errors name the spec field.
pub fn fetch_all(
    loaded: &Loaded,
    cache: &Path,
    parallel: usize,
    progress: &Progress,
) -> Result<Vec<(String, Fetched)>> {
    fetch_only(loaded, cache, parallel, progress, &[])
}

/// [`fetch_all`] for the inputs named by field in `only` (all of them when it is empty; a name the spec does not
/// have is an error listing the ones it has). Each input's outcome is an `input` event: for one built from source,
/// whether it was built in this run or taken from the cache, and the record of that build.
pub fn fetch_only(
    loaded: &Loaded,
    cache: &Path,
    parallel: usize,
    progress: &Progress,
    only: &[String],
) -> Result<Vec<(String, Fetched)>> {
    let sources = loaded.spec.sources();
    if let Some(unknown) = only.iter().find(|o| !sources.iter().any(|(f, _)| f == *o)) {
        bail!(
            "{}: no input {unknown:?}; the spec's inputs are {}",
            loaded.path.display(),
            sources
                .iter()
                .map(|(f, _)| f.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let wanted = |field: &str| only.is_empty() || only.iter().any(|o| o == field);
    let mut done = download_all(loaded, cache, parallel, progress, &wanted)?;
    for (field, f) in sources {
        let (Some(recipe), Some(hex)) = (f.recipe(), f.sha256.as_deref()) else {
            continue;
        };
        if !wanted(&field) {
            continue;
        }
        let (key, what) = f.source_ref().expect("a recipe has a source");
        if !cached(cache, hex).is_file() {
            progress.step("fetch", &format!("building {what} ({field})"));
        }
        let recipe = recipe.located(&loaded.dir, |h| cached(cache, h));
        let (_, fetched) = build_source(cache, &recipe, Some(hex))
            .with_context(|| format!("{}: {field}.{key}", loaded.path.display()))?;
        fetched.report(progress, &field, &what);
        done.push((what, fetched));
    }
    Ok(done)
}

fn download_all(
    loaded: &Loaded,
    cache: &Path,
    parallel: usize,
    progress: &Progress,
    wanted: &dyn Fn(&str) -> bool,
) -> Result<Vec<(String, Fetched)>> {
    let jobs: Vec<(String, String, String)> = loaded
        .spec
        .sources()
        .into_iter()
        .filter(|(field, _)| wanted(field))
        .filter_map(|(field, f)| Some((field, f.url?, f.sha256?)))
        .collect();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..parallel.max(1).min(jobs.len().max(1)) {
            s.spawn(|| loop {
                let k = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some((field, url, hex)) = jobs.get(k) else {
                    break;
                };
                let r = fetch_with_progress(cache, url, hex, Some(progress))
                    .with_context(|| format!("{}: {field}.url", loaded.path.display()));
                if let Ok(f) = &r {
                    f.report(progress, field, url);
                }
                results
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push((k, url.clone(), r));
            });
        }
    });
    let mut results = results.into_inner().unwrap_or_else(|p| p.into_inner());
    results.sort_by_key(|r| r.0);
    results
        .into_iter()
        .map(|(_, url, r)| r.map(|f| (url, f)))
        .collect()
}
