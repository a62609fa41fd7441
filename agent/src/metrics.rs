//! Prometheus text metrics: requests by route, method and status, and their durations; bytes served; open
//! upload sessions; reconciles and their durations; certificates' expiry; the `process_*` set (`process`).
//! Hand-rolled to keep the hot path at one mutex-free atomic add for bytes.

mod histogram;
pub mod process;

pub use histogram::{Histogram, BUCKETS};

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use crate::store::blobs::ReadPath;

/// A request method as a metric label and in the log: one of HTTP's own, or "other" (a method is any token a
/// client likes, and each distinct one would otherwise be a new series kept forever).
pub fn method_label(method: &axum::http::Method) -> &'static str {
    use axum::http::Method as M;
    match *method {
        M::GET => "GET",
        M::HEAD => "HEAD",
        M::POST => "POST",
        M::PUT => "PUT",
        M::PATCH => "PATCH",
        M::DELETE => "DELETE",
        M::OPTIONS => "OPTIONS",
        M::CONNECT => "CONNECT",
        M::TRACE => "TRACE",
        _ => "other",
    }
}

/// `value` as a label's value in the text format: `\`, `"` and line feeds escaped (values that come from
/// objects in the API server).
fn label_value(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The three kinds of upload the expiry sweep looks after.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UploadKind {
    Registry = 0,
    Rest = 1,
    Tus = 2,
}

const UPLOAD_KINDS: [&str; 3] = ["registry", "rest", "tus"];

#[derive(Default)]
struct UploadStats {
    /// (sessions, bytes) pending at the last sweep, by kind.
    pending: [(u64, u64); 3],
    expired: [u64; 3],
    reclaimed_bytes: u64,
}

/// The requests of one route and method.
#[derive(Clone, Default)]
struct Requests {
    by_status: BTreeMap<u16, u64>,
    durations: Histogram,
}

#[derive(Default)]
pub struct Metrics {
    /// Keys are all static: a client cannot add series (a made-up method counts as "other").
    /// By route and method: requests by status, and the time to each response's head (not by status: a series
    /// per status and bucket would be many series for little). One lock per request.
    requests: Mutex<BTreeMap<(&'static str, &'static str), Requests>>,
    /// Bytes sent from memory-mapped blob files and from `pread` buffers (see `store::blobs::ReadPath`).
    bytes_mapped: AtomicU64,
    bytes_copied: AtomicU64,
    bytes_sendfile: AtomicU64,
    bytes_buffered: AtomicU64,
    /// Per controller: reconciles' durations (and so their count), and errors by cause.
    reconciles: Mutex<BTreeMap<&'static str, Histogram>>,
    reconcile_errors: Mutex<BTreeMap<(&'static str, &'static str), u64>>,
    leader: AtomicU64,
    /// BareMetalHosts by (provisioning state, error type), as the leading agent last saw them.
    hosts: Mutex<BTreeMap<(String, String), u64>>,
    /// Times a limit on what clients may cost was reached, by limit.
    limits: Mutex<BTreeMap<&'static str, u64>>,
    uploads: Mutex<UploadStats>,
    /// Each certificate's end of validity, as Unix time, by the name the operator gave it.
    certificates: Mutex<BTreeMap<String, u64>>,
    /// Writes that changed something, by the credential that made them (names from the operator's file).
    writes: Mutex<BTreeMap<String, u64>>,
}

impl Metrics {
    /// Metrics with one series of every labelled metric, for the generated reference
    /// (`crate::reference`): what each metric's labels are shows only in its series.
    pub fn example() -> Metrics {
        let m = Metrics::default();
        let second = std::time::Duration::from_secs(1);
        m.request("manifest", "GET", 200, second);
        m.reconciled("bpa", second);
        m.reconcile_error("bpa", "api");
        m.limit_reached("connections");
        m.set_certificate_expiry("agent", Some(std::time::UNIX_EPOCH));
        m.write_by("admin");
        m.set_hosts(BTreeMap::from([(
            ("available".to_owned(), String::new()),
            1,
        )]));
        m
    }

    /// Counts a request whose response's head took `took`; `method` is a [`method_label`].
    pub fn request(
        &self,
        route: &'static str,
        method: &'static str,
        status: u16,
        took: std::time::Duration,
    ) {
        let mut r = self.requests.lock().unwrap_or_else(|p| p.into_inner());
        let e = r.entry((route, method)).or_default();
        *e.by_status.entry(status).or_default() += 1;
        e.durations.observe(took.as_secs_f64());
    }

    pub fn served(&self, path: ReadPath, bytes: u64) {
        match path {
            ReadPath::Mapped => &self.bytes_mapped,
            ReadPath::Copied => &self.bytes_copied,
            // Counted by the writer as it sends them (`sent_from_file`): only it knows they left by sendfile.
            ReadPath::Lent => return,
        }
        .fetch_add(bytes, Ordering::Relaxed);
    }

    /// `bytes` of a lent chunk went to a client by `sendfile`.
    pub fn sent_from_file(&self, bytes: u64) {
        self.bytes_sendfile.fetch_add(bytes, Ordering::Relaxed);
    }

    /// `bytes` of a lent chunk went to a client on this host through a thread's buffer.
    pub fn sent_buffered(&self, bytes: u64) {
        self.bytes_buffered.fetch_add(bytes, Ordering::Relaxed);
    }

    pub fn reconciled(&self, controller: &'static str, took: std::time::Duration) {
        let mut r = self.reconciles.lock().unwrap_or_else(|p| p.into_inner());
        r.entry(controller).or_default().observe(took.as_secs_f64());
    }

    pub fn reconcile_error(&self, controller: &'static str, cause: &'static str) {
        let mut r = self
            .reconcile_errors
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        *r.entry((controller, cause)).or_default() += 1;
    }

    /// Sets a limit's count kept elsewhere (the store counts the uploads it refused).
    pub fn limit_count(&self, limit: &'static str, n: u64) {
        if n > 0 {
            let mut l = self.limits.lock().unwrap_or_else(|p| p.into_inner());
            l.insert(limit, n);
        }
    }

    /// An abandoned upload of `bytes` was freed.
    pub fn upload_expired(&self, kind: UploadKind, bytes: u64) {
        let mut u = self.uploads.lock().unwrap_or_else(|p| p.into_inner());
        u.expired[kind as usize] += 1;
        u.reclaimed_bytes += bytes;
    }

    /// What the last sweep found still pending: (sessions, bytes) by [`UploadKind`].
    pub fn set_uploads_pending(&self, pending: [(u64, u64); 3]) {
        self.uploads
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pending = pending;
    }

    /// A limit on clients was reached (see `foothold_limit_reached_total`).
    pub fn limit_reached(&self, limit: &'static str) {
        let mut l = self.limits.lock().unwrap_or_else(|p| p.into_inner());
        *l.entry(limit).or_default() += 1;
    }

    /// A certificate's end of validity, or `None` when its file cannot be read (the series goes away).
    pub fn set_certificate_expiry(&self, name: &str, not_after: Option<std::time::SystemTime>) {
        let mut c = self.certificates.lock().unwrap_or_else(|p| p.into_inner());
        match not_after {
            Some(t) => {
                let secs = t
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs());
                c.insert(name.to_string(), secs);
            }
            None => {
                c.remove(name);
            }
        }
    }

    /// A write that changed something, made by `credential` (`-` without authorisation).
    pub fn write_by(&self, credential: &str) {
        let mut w = self.writes.lock().unwrap_or_else(|p| p.into_inner());
        match w.get_mut(credential) {
            Some(n) => *n += 1,
            None => {
                w.insert(credential.to_owned(), 1);
            }
        }
    }

    /// Each reported certificate's end of validity, as Unix time, by name.
    pub fn certificate_expiries(&self) -> BTreeMap<String, u64> {
        self.certificates
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The BareMetalHosts' counts by (provisioning state, error type), replacing the last.
    pub fn set_hosts(&self, counts: BTreeMap<(String, String), u64>) {
        *self.hosts.lock().unwrap_or_else(|p| p.into_inner()) = counts;
    }

    pub fn set_leader(&self, leading: bool) {
        self.leader.store(u64::from(leading), Ordering::Relaxed);
    }

    pub fn render(&self, uploads_open: u64) -> String {
        let mut out = String::new();
        out.push_str(
            "# HELP foothold_build_info The agent's version, as a label (the value is 1).\n",
        );
        out.push_str("# TYPE foothold_build_info gauge\n");
        let _ = writeln!(
            out,
            "foothold_build_info{{version=\"{}\"}} 1",
            env!("CARGO_PKG_VERSION")
        );
        out.push_str(
            "# HELP foothold_http_requests_total HTTP requests by route, method and status.\n",
        );
        out.push_str("# TYPE foothold_http_requests_total counter\n");
        let requests = self
            .requests
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        for ((route, method), r) in &requests {
            for (status, n) in &r.by_status {
                let _ = writeln!(out, "foothold_http_requests_total{{route=\"{route}\",method=\"{method}\",status=\"{status}\"}} {n}");
            }
        }
        out.push_str("# HELP foothold_http_request_duration_seconds Time from a request's arrival to its response's head, by route and method (a body streamed after it is not counted).\n");
        out.push_str("# TYPE foothold_http_request_duration_seconds histogram\n");
        for ((route, method), r) in &requests {
            r.durations.render(
                &mut out,
                "foothold_http_request_duration_seconds",
                &format!("route=\"{route}\",method=\"{method}\""),
            );
        }
        out.push_str("# HELP foothold_bytes_served_total Blob and file bytes sent to clients, by how they were read: \"sendfile\" (from the file to the socket, no copy in the process), \"mapped\" (memory-mapped, no copy in user space), \"copied\" (pread) or \"buffered\" (to a client on this host, through a buffer of the thread's).\n");
        out.push_str("# TYPE foothold_bytes_served_total counter\n");
        for (path, n) in [
            ("sendfile", &self.bytes_sendfile),
            ("mapped", &self.bytes_mapped),
            ("copied", &self.bytes_copied),
            ("buffered", &self.bytes_buffered),
        ] {
            let _ = writeln!(
                out,
                "foothold_bytes_served_total{{path=\"{path}\"}} {}",
                n.load(Ordering::Relaxed)
            );
        }
        out.push_str("# HELP foothold_limit_reached_total Times a limit on what clients may cost was reached, by limit.\n");
        out.push_str("# TYPE foothold_limit_reached_total counter\n");
        for (limit, n) in self.limits.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            let _ = writeln!(out, "foothold_limit_reached_total{{limit=\"{limit}\"}} {n}");
        }
        {
            let u = self.uploads.lock().unwrap_or_else(|p| p.into_inner());
            out.push_str("# HELP foothold_uploads_pending Unfinished uploads at the last expiry sweep, by kind.\n");
            out.push_str("# TYPE foothold_uploads_pending gauge\n");
            for (kind, (n, _)) in UPLOAD_KINDS.iter().zip(u.pending) {
                let _ = writeln!(out, "foothold_uploads_pending{{kind=\"{kind}\"}} {n}");
            }
            out.push_str("# HELP foothold_uploads_pending_bytes Bytes held by unfinished uploads at the last expiry sweep, by kind.\n");
            out.push_str("# TYPE foothold_uploads_pending_bytes gauge\n");
            for (kind, (_, b)) in UPLOAD_KINDS.iter().zip(u.pending) {
                let _ = writeln!(out, "foothold_uploads_pending_bytes{{kind=\"{kind}\"}} {b}");
            }
            out.push_str("# HELP foothold_uploads_expired_total Abandoned uploads freed by the expiry sweep, by kind.\n");
            out.push_str("# TYPE foothold_uploads_expired_total counter\n");
            for (kind, n) in UPLOAD_KINDS.iter().zip(u.expired) {
                let _ = writeln!(out, "foothold_uploads_expired_total{{kind=\"{kind}\"}} {n}");
            }
            out.push_str("# HELP foothold_upload_bytes_reclaimed_total Bytes freed by expiring abandoned uploads.\n");
            out.push_str("# TYPE foothold_upload_bytes_reclaimed_total counter\n");
            let _ = writeln!(
                out,
                "foothold_upload_bytes_reclaimed_total {}",
                u.reclaimed_bytes
            );
        }
        out.push_str("# HELP foothold_upload_sessions_open Registry upload sessions not yet finished or cancelled.\n");
        out.push_str("# TYPE foothold_upload_sessions_open gauge\n");
        let _ = writeln!(out, "foothold_upload_sessions_open {uploads_open}");
        out.push_str("# HELP foothold_certificate_expiry_seconds When a certificate stops being valid (Unix time), by name: agent is the one served.\n");
        out.push_str("# TYPE foothold_certificate_expiry_seconds gauge\n");
        for (name, t) in self
            .certificates
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
        {
            let _ = writeln!(
                out,
                "foothold_certificate_expiry_seconds{{name=\"{name}\"}} {t}"
            );
        }
        out.push_str("# HELP foothold_writes_total Writes that changed something (2xx), by the credential that made them.\n");
        out.push_str("# TYPE foothold_writes_total counter\n");
        for (credential, n) in self.writes.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            let _ = writeln!(
                out,
                "foothold_writes_total{{credential=\"{credential}\"}} {n}"
            );
        }
        out.push_str("# HELP foothold_controller_leader Whether this agent holds the controllers' leader lease.\n");
        out.push_str("# TYPE foothold_controller_leader gauge\n");
        let _ = writeln!(
            out,
            "foothold_controller_leader {}",
            self.leader.load(Ordering::Relaxed)
        );
        out.push_str("# HELP foothold_baremetalhosts BareMetalHosts the leading agent sees, by provisioning state and error type (empty when none).\n");
        out.push_str("# TYPE foothold_baremetalhosts gauge\n");
        for ((state, error), n) in self.hosts.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            let _ = writeln!(
                out,
                "foothold_baremetalhosts{{state=\"{}\",error_type=\"{}\"}} {n}",
                label_value(state),
                label_value(error)
            );
        }
        let reconciles = self
            .reconciles
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        out.push_str("# HELP foothold_reconciles_total Reconciles run, by controller.\n");
        out.push_str("# TYPE foothold_reconciles_total counter\n");
        for (c, h) in &reconciles {
            let _ = writeln!(
                out,
                "foothold_reconciles_total{{controller=\"{c}\"}} {}",
                h.count()
            );
        }
        out.push_str(
            "# HELP foothold_reconcile_duration_seconds Time spent reconciling, by controller.\n",
        );
        out.push_str("# TYPE foothold_reconcile_duration_seconds histogram\n");
        for (c, h) in &reconciles {
            h.render(
                &mut out,
                "foothold_reconcile_duration_seconds",
                &format!("controller=\"{c}\""),
            );
        }
        out.push_str(
            "# HELP foothold_reconcile_errors_total Failed reconciles, by controller and cause.\n",
        );
        out.push_str("# TYPE foothold_reconcile_errors_total counter\n");
        for ((c, cause), n) in self
            .reconcile_errors
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
        {
            let _ = writeln!(
                out,
                "foothold_reconcile_errors_total{{controller=\"{c}\",cause=\"{cause}\"}} {n}"
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_from_objects_are_escaped() {
        assert_eq!(
            label_value("externally provisioned"),
            "externally provisioned"
        );
        assert_eq!(label_value("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }

    #[test]
    fn durations_are_histograms_by_route_and_method_and_by_controller() {
        let m = Metrics::default();
        m.request("manifest", "GET", 200, std::time::Duration::from_millis(3));
        m.request("manifest", "GET", 404, std::time::Duration::from_millis(40));
        m.reconciled("bpa", std::time::Duration::from_millis(200));
        m.set_hosts(BTreeMap::from([(
            ("registering".to_owned(), "registration error".to_owned()),
            1,
        )]));
        let out = m.render(0);
        assert!(out.contains("# TYPE foothold_http_request_duration_seconds histogram\n"));
        assert!(out.contains(
            "foothold_http_request_duration_seconds_bucket{route=\"manifest\",method=\"GET\",le=\"0.005\"} 1\n"
        ), "{out}");
        assert!(out.contains(
            "foothold_http_request_duration_seconds_count{route=\"manifest\",method=\"GET\"} 2\n"
        ), "{out}");
        assert!(out.contains("# TYPE foothold_reconcile_duration_seconds histogram\n"));
        assert!(
            out.contains(
                "foothold_reconcile_duration_seconds_bucket{controller=\"bpa\",le=\"0.25\"} 1\n"
            ),
            "{out}"
        );
        assert!(
            out.contains("foothold_reconciles_total{controller=\"bpa\"} 1\n"),
            "{out}"
        );
        assert!(out.contains(
            "foothold_baremetalhosts{state=\"registering\",error_type=\"registration error\"} 1\n"
        ), "{out}");
    }
}
