//! The drain hold, pure: which changes of a claimed, provisioned host wait for its drain, what the refusal
//! says, and what the BPA does about each host.

use super::hold::*;
use crate::crd::metal3::BareMetalHost;
use serde_json::json;

/// A host of Provisioning `c1` (claimed when `claimed`), in `state`, with `annotations`.
fn host(claimed: bool, state: &str, annotations: serde_json::Value) -> BareMetalHost {
    let consumer = claimed.then(|| {
        json!({"apiVersion": "bpa.akraino.org/v1alpha1", "kind": "Provisioning", "name": "c1",
               "namespace": "site"})
    });
    serde_json::from_value(json!({
        "apiVersion": "metal3.io/v1alpha1", "kind": "BareMetalHost",
        "metadata": {"name": "node-1", "namespace": "site", "annotations": annotations},
        "spec": {"online": true, "image": {"url": "http://172.22.0.1:5000/files/node.qcow2"},
                 "consumerRef": consumer},
        "status": {"provisioning": {"state": state}},
    }))
    .unwrap()
}

fn changed(h: &BareMetalHost, f: impl FnOnce(&mut BareMetalHost)) -> BareMetalHost {
    let mut new = h.clone();
    f(&mut new);
    new
}

#[test]
fn every_way_of_taking_the_node_away_is_seen_and_nothing_else() {
    let h = host(true, PROVISIONED, json!({}));
    assert_eq!(departure(&h, None), Some(Departure::Deleted));
    let gone = changed(&h, |n| n.spec.image = None);
    assert_eq!(departure(&h, Some(&gone)), Some(Departure::Deprovisioned));
    let other = changed(&h, |n| {
        n.spec.image.as_mut().unwrap().url = "http://x/other.qcow2".into()
    });
    assert_eq!(departure(&h, Some(&other)), Some(Departure::Reimaged));
    let off = changed(&h, |n| n.spec.online = false);
    assert_eq!(departure(&h, Some(&off)), Some(Departure::PoweredOff));
    // A new checksum for the same URL, a label, powering on: the node stays.
    let same = changed(&h, |n| {
        n.spec.image.as_mut().unwrap().checksum = Some("sha256:00".into());
        n.metadata.labels = Some([("a".to_owned(), "b".to_owned())].into());
    });
    assert_eq!(departure(&h, Some(&same)), None);
    let off_host = changed(&h, |n| n.spec.online = false);
    let on = changed(&off_host, |n| n.spec.online = true);
    assert_eq!(departure(&off_host, Some(&on)), None);
}

#[test]
fn a_claimed_provisioned_host_waits_for_its_drain_and_the_refusal_says_what_to_do() {
    let h = host(true, PROVISIONED, json!({}));
    let why = admit(&h, None).unwrap_err();
    for said in [
        "BareMetalHost site/node-1",
        "Provisioning c1's cluster",
        "deleting it",
        DRAIN_ANNOTATION,
        DRAINED_ANNOTATION,
        "PodDisruptionBudgets",
    ] {
        assert!(why.contains(said), "{said:?} not in {why:?}");
    }
    let gone = changed(&h, |n| n.spec.image = None);
    assert!(admit(&h, Some(&gone))
        .unwrap_err()
        .contains("deprovisioning it (spec.image removed)"));
    let off = changed(&h, |n| n.spec.online = false);
    assert!(admit(&h, Some(&off))
        .unwrap_err()
        .contains("powering it off"));

    // Asked for, not done yet: the refusal says it is under way.
    let asked = host(true, PROVISIONED, json!({DRAIN_ANNOTATION: ""}));
    assert!(admit(&asked, None)
        .unwrap_err()
        .contains("its drain is under way"));
    // Drained: it may go, every way.
    let drained = host(
        true,
        PROVISIONED,
        json!({DRAIN_ANNOTATION: "", DRAINED_ANNOTATION: "worker-1"}),
    );
    assert_eq!(admit(&drained, None), Ok(()));
    assert_eq!(
        admit(&drained, Some(&changed(&drained, |n| n.spec.image = None))),
        Ok(())
    );
    // An empty drained annotation is not a drain.
    let empty = host(true, PROVISIONED, json!({DRAINED_ANNOTATION: ""}));
    assert!(admit(&empty, None).is_err());
}

#[test]
fn hosts_without_a_node_of_a_provisioning_go_freely() {
    // Not claimed, claimed by something else, not provisioned yet: nothing to drain.
    assert_eq!(admit(&host(false, PROVISIONED, json!({})), None), Ok(()));
    let mut other = host(true, PROVISIONED, json!({}));
    other.spec.consumer_ref.as_mut().unwrap().kind = Some("Metal3Machine".into());
    assert_eq!(admit(&other, None), Ok(()));
    for state in ["available", "provisioning", "deprovisioning", "inspecting"] {
        assert_eq!(
            admit(&host(true, state, json!({})), None),
            Ok(()),
            "{state}"
        );
    }
    // A change that keeps the node: allowed without a drain.
    let h = host(true, PROVISIONED, json!({}));
    let relabelled = changed(&h, |n| {
        n.metadata.labels = Some([("x".to_owned(), "y".to_owned())].into())
    });
    assert_eq!(admit(&h, Some(&relabelled)), Ok(()));
}

#[test]
fn the_bpa_drains_asked_members_marks_others_undoes_a_taken_back_drain_and_forgets_departed_hosts()
{
    let asked = host(true, PROVISIONED, json!({DRAIN_ANNOTATION: ""}));
    assert_eq!(
        step(&asked, Some("worker-1"), "worker-1"),
        Step::Drain("worker-1".into())
    );
    // Not a member yet (joining, or its install failed): no node, nothing to move.
    assert_eq!(
        step(&asked, None, "worker-1"),
        Step::Drained("worker-1".into())
    );
    let done = host(
        true,
        PROVISIONED,
        json!({DRAIN_ANNOTATION: "", DRAINED_ANNOTATION: "worker-1"}),
    );
    assert_eq!(step(&done, Some("worker-1"), "worker-1"), Step::Nothing);
    let taken_back = host(true, PROVISIONED, json!({DRAINED_ANNOTATION: "worker-1"}));
    assert_eq!(
        step(&taken_back, Some("worker-1"), "worker-1"),
        Step::Uncordon("worker-1".into())
    );
    for state in ["deprovisioning", "available", "powering off before delete"] {
        assert_eq!(
            step(&host(true, state, json!({DRAIN_ANNOTATION: ""})), None, "w"),
            Step::Forget
        );
        assert_eq!(
            step(&host(true, state, json!({})), None, "w"),
            Step::Nothing
        );
    }
    assert_eq!(
        step(&host(true, PROVISIONED, json!({})), Some("w"), "w"),
        Step::Nothing
    );
}
