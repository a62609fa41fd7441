//! How each host went in a package installer run: what `install-software` leaves as its container's last words
//! (Kubernetes keeps 4 KiB of a termination message) and the Software reconciler reads into `status.hosts`.

use serde::{Deserialize, Serialize};

/// Where a host stands after a run, in the order of what an operator must see first: the greater outweighs
/// (a host with one package failed and one updated is `Failed`) and comes first in a report.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum HostState {
    /// Every package was already there, at that version or content.
    Unchanged,
    /// Not started: an earlier host failed, and a rollout stops at its first failure.
    Skipped,
    /// At least one package was installed or replaced.
    Updated,
    /// A package failed (or the host could not be reached).
    Failed,
}

impl HostState {
    pub fn as_str(self) -> &'static str {
        match self {
            HostState::Updated => "Updated",
            HostState::Unchanged => "Unchanged",
            HostState::Failed => "Failed",
            HostState::Skipped => "Skipped",
        }
    }
}

/// One host's line of the report.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostReport {
    pub host: String,
    pub state: HostState,
    /// What was done (`hello 1.1 installed; /usr/local/bin/tool already installed`) or why it failed or was
    /// skipped.
    pub detail: String,
}

/// The report as the installer leaves it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Report {
    pub hosts: Vec<HostReport>,
    /// Hosts left out to keep the report within [`LIMIT`] (the last of the order below).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub omitted: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// What a termination message may hold, with room to spare below Kubernetes' 4,096 bytes.
pub const LIMIT: usize = 4000;
/// How much of one host's detail the report keeps.
const DETAIL: usize = 300;

impl Report {
    /// `hosts` as JSON of at most [`LIMIT`] bytes: failed hosts first, then updated, skipped and unchanged ones
    /// (what an operator must see first survives a cut), each detail cut to [`DETAIL`] characters, and hosts
    /// dropped from the end (counted in `omitted`) while it is still too long.
    pub fn encode(hosts: &[HostReport]) -> String {
        let mut hosts: Vec<HostReport> = hosts
            .iter()
            .map(|h| HostReport {
                detail: cut(&h.detail, DETAIL),
                ..h.clone()
            })
            .collect();
        hosts.sort_by_key(|h| std::cmp::Reverse(h.state));
        let mut report = Report { hosts, omitted: 0 };
        loop {
            let text = serde_json::to_string(&report).expect("a report serializes");
            if text.len() <= LIMIT || report.hosts.is_empty() {
                return text;
            }
            report.hosts.pop();
            report.omitted += 1;
        }
    }

    /// The report in a termination message, if the message is one (a refusal's is a `FAILED: …` line).
    pub fn decode(text: &str) -> Option<Report> {
        serde_json::from_str(text.trim()).ok()
    }
}

/// `text` cut to at most `max` characters, `…` marking a cut.
fn cut(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        None => text.to_owned(),
        Some((end, _)) => format!("{}…", &text[..end]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn host(name: &str, state: HostState, detail: &str) -> HostReport {
        HostReport {
            host: name.into(),
            state,
            detail: detail.into(),
        }
    }

    #[test]
    fn a_report_reads_back_failures_first_and_a_refusal_is_not_one() {
        let hosts = [
            host("m", HostState::Unchanged, "hello 1.0 already installed"),
            host("w1", HostState::Updated, "hello 1.1 installed"),
            host("w2", HostState::Failed, "hello: exit status 100: E: broken"),
            host("w3", HostState::Skipped, "w2 failed"),
        ];
        let text = Report::encode(&hosts);
        let back = Report::decode(&text).unwrap();
        let order: Vec<&str> = back.hosts.iter().map(|h| h.host.as_str()).collect();
        assert_eq!(order, ["w2", "w1", "w3", "m"]);
        assert_eq!(back.omitted, 0);
        assert_eq!(back.hosts[0], hosts[2]);
        assert_eq!(Report::decode("FAILED: inventory: no hosts"), None);
    }

    proptest! {
        /// However many hosts and however long their details, the report fits a termination message, reads
        /// back, and accounts for every host: kept or counted as omitted, failures kept before any other.
        #[test]
        fn a_report_fits_and_counts_every_host(
            hosts in proptest::collection::vec(("[a-z0-9-]{1,63}", 0..4u8, ".{0,600}"), 0..200)
        ) {
            let hosts: Vec<HostReport> = hosts
                .iter()
                .map(|(name, s, detail)| {
                    let state = [HostState::Updated, HostState::Unchanged, HostState::Failed, HostState::Skipped]
                        [usize::from(*s)];
                    host(name, state, detail)
                })
                .collect();
            let text = Report::encode(&hosts);
            prop_assert!(text.len() <= LIMIT);
            let back = Report::decode(&text).unwrap();
            prop_assert_eq!(back.hosts.len() + back.omitted, hosts.len());
            let failed = hosts.iter().filter(|h| h.state == HostState::Failed).count();
            let kept_failed = back.hosts.iter().filter(|h| h.state == HostState::Failed).count();
            prop_assert!(kept_failed == failed || back.hosts.iter().all(|h| h.state == HostState::Failed));
            prop_assert!(back.hosts.iter().all(|h| h.detail.chars().count() <= DETAIL + 1));
        }
    }
}
