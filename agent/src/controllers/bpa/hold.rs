//! Drain before a host goes, pure. A BareMetalHost that a Provisioning claimed (its `consumerRef`) and that is
//! `provisioned` carries a node of the workload cluster: deleting it, deprovisioning it (`spec.image` removed),
//! giving it another image or powering it off (`spec.online` false) by hand would take the node away with its
//! pods on it. The agent's admission webhook ([`admit`], served at [`WEBHOOK_PATH`], registered by
//! `admission::register`) refuses such a change until the host carries [`DRAINED_ANNOTATION`], and says how
//! to get there: annotate the host [`DRAIN_ANNOTATION`]; the BPA ([`step`]) cordons its node and evicts its
//! pods through the Eviction API (PodDisruptionBudgets hold), then sets [`DRAINED_ANNOTATION`] to the node's
//! name. The refusal has no side effect: the webhook changes nothing, whoever calls it, and the drain is asked
//! for by an annotation the operator's own RBAC allows or not.
//!
//! After the host left `provisioned` both annotations go (a host provisioned again is held again); the drain
//! annotation taken away before that uncordons the node. To let a host go without a drain (its cluster cannot
//! be reached), set both annotations by hand.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Resource;

use crate::crd::bpa::Provisioning;
use crate::crd::metal3::BareMetalHost;

/// Set by the operator: drain this host's node, so that it may go.
pub const DRAIN_ANNOTATION: &str = "bpa.akraino.org/drain";
/// Set by the BPA once the node is drained (its value: the node's name): the host may go.
pub const DRAINED_ANNOTATION: &str = "bpa.akraino.org/drained";
/// The ValidatingWebhookConfiguration's name.
pub const WEBHOOK_NAME: &str = "foothold-baremetalhost-drain";
/// Where the agent answers the API server's AdmissionReviews for BareMetalHosts.
pub const WEBHOOK_PATH: &str = "/admission/baremetalhosts";
/// The provisioning state in which a host runs its node.
pub const PROVISIONED: &str = "provisioned";

/// What a change does that takes a host's node away.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Departure {
    Deleted,
    Deprovisioned,
    Reimaged,
    PoweredOff,
}

impl Departure {
    fn what(self) -> &'static str {
        match self {
            Departure::Deleted => "deleting it",
            Departure::Deprovisioned => "deprovisioning it (spec.image removed)",
            Departure::Reimaged => "another image (spec.image.url changed)",
            Departure::PoweredOff => "powering it off (spec.online false)",
        }
    }
}

/// What changing `old` into `new` (None: deleting it) does that takes its node away, if anything.
pub fn departure(old: &BareMetalHost, new: Option<&BareMetalHost>) -> Option<Departure> {
    let Some(new) = new else {
        return Some(Departure::Deleted);
    };
    match (&old.spec.image, &new.spec.image) {
        (Some(_), None) => return Some(Departure::Deprovisioned),
        (Some(a), Some(b)) if a.url != b.url => return Some(Departure::Reimaged),
        _ => {}
    }
    (old.spec.online && !new.spec.online).then_some(Departure::PoweredOff)
}

/// The Provisioning `host` belongs to, if a Provisioning claimed it.
pub fn claimed_by(host: &BareMetalHost) -> Option<&ObjectReference> {
    host.spec.consumer_ref.as_ref().filter(|c| {
        c.kind.as_deref() == Some(&Provisioning::kind(&()))
            && c.api_version.as_deref() == Some(&Provisioning::api_version(&()))
    })
}

/// `host`'s annotation `key`, if it has one.
pub fn annotation<'a>(host: &'a BareMetalHost, key: &str) -> Option<&'a str> {
    host.metadata
        .annotations
        .as_ref()?
        .get(key)
        .map(String::as_str)
}

/// Whether `host` is `provisioned`.
pub fn provisioned(host: &BareMetalHost) -> bool {
    host.status
        .as_ref()
        .and_then(|s| s.provisioning.as_ref())
        .is_some_and(|p| p.state == PROVISIONED)
}

/// Whether the change of `old` into `new` (None: its deletion) may go; if not, the refusal's message, which
/// names the host, its cluster, the change and what to do.
pub fn admit(old: &BareMetalHost, new: Option<&BareMetalHost>) -> Result<(), String> {
    let Some(owner) = claimed_by(old) else {
        return Ok(());
    };
    if !provisioned(old) || annotation(old, DRAINED_ANNOTATION).is_some_and(|v| !v.is_empty()) {
        return Ok(());
    }
    let Some(departure) = departure(old, new) else {
        return Ok(());
    };
    let host = format!(
        "{}/{}",
        old.metadata.namespace.as_deref().unwrap_or_default(),
        old.metadata.name.as_deref().unwrap_or_default()
    );
    let owner = owner.name.as_deref().unwrap_or_default();
    let next = if annotation(old, DRAIN_ANNOTATION).is_some() {
        format!("its drain is under way: the BPA sets {DRAINED_ANNOTATION} when it is done")
    } else {
        format!(
            "annotate it {DRAIN_ANNOTATION}=\"\" and the BPA cordons the node and evicts its pods \
             (PodDisruptionBudgets hold), then sets {DRAINED_ANNOTATION}; or take the host out of the \
             Provisioning"
        )
    };
    Err(format!(
        "BareMetalHost {host} runs a node of Provisioning {owner}'s cluster: {} waits until the node is \
         drained; {next}, then try again",
        departure.what()
    ))
}

/// What the BPA does about a host of its cluster's drain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    Nothing,
    /// Drain this node; set [`DRAINED_ANNOTATION`] to its name once it is.
    Drain(String),
    /// Nothing runs on the host that a drain would move (it is not a member): set [`DRAINED_ANNOTATION`] to
    /// this.
    Drained(String),
    /// The drain was taken back: make the node schedulable and remove [`DRAINED_ANNOTATION`].
    Uncordon(String),
    /// The host left `provisioned`: remove both annotations.
    Forget,
}

/// `node`: the host's node if it is a member of the cluster (its label, which the installer names the node
/// by). `label`: the host's label in the Provisioning.
pub fn step(host: &BareMetalHost, node: Option<&str>, label: &str) -> Step {
    let asked = annotation(host, DRAIN_ANNOTATION).is_some();
    let drained = annotation(host, DRAINED_ANNOTATION);
    if !provisioned(host) {
        return if asked || drained.is_some() {
            Step::Forget
        } else {
            Step::Nothing
        };
    }
    match (asked, drained, node) {
        (true, None, Some(n)) => Step::Drain(n.to_owned()),
        (true, None, None) => Step::Drained(label.to_owned()),
        (false, Some(n), _) if !n.is_empty() => Step::Uncordon(n.to_owned()),
        _ => Step::Nothing,
    }
}
