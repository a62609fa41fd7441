//! Where each host of a Provisioning stands in its cluster (`status.hosts[].membership`), which hosts the last
//! finished install made members (`status.installedHosts`), and which BareMetalHosts the Provisioning lets go.
//! Pure: the plan, the last status and the installer Job's stage in; unit-tested.
//!
//! A host the spec lists is `Joining` while the Job that installs it runs and `Member` once a Job finished with
//! it. A member the spec no longer lists is `Leaving` until a Job runs (the spec's other hosts may not be ready
//! yet), `Removing` while the Job drains, resets and deletes it, and `Removed` once the Job finished: then its
//! BareMetalHost is released (its `consumerRef` cleared).

use std::collections::BTreeSet;

use crate::crd::bpa::HostStatus;

pub const JOINING: &str = "Joining";
pub const MEMBER: &str = "Member";
pub const LEAVING: &str = "Leaving";
pub const REMOVING: &str = "Removing";
pub const REMOVED: &str = "Removed";

/// Where this generation's installer Job is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// No Job: the hosts are not all matched, fit and provisioned.
    Waiting,
    Running,
    Succeeded,
    Failed,
}

/// What [`membership`] decided.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Membership {
    /// The plan's hosts with their membership, then the hosts leaving or gone.
    pub hosts: Vec<HostStatus>,
    /// `status.installedHosts` from now on.
    pub installed: Vec<HostStatus>,
    /// BareMetalHosts to release: this Provisioning's (`ours`) that its cluster no longer has.
    pub release: Vec<String>,
}

/// `planned`: the plan's hosts. `installed`: the last status's `installedHosts`. `shown`: the last status's
/// hosts, whose `Removed` entries stay while `same_job` (the Job that removed them is this generation's).
/// `ours`: the BareMetalHosts whose `consumerRef` is this Provisioning.
pub fn membership(
    planned: &[HostStatus],
    installed: &[HostStatus],
    (shown, same_job): (&[HostStatus], bool),
    stage: Stage,
    ours: &[String],
) -> Membership {
    let listed: BTreeSet<&str> = planned.iter().map(|h| h.label.as_str()).collect();
    let was_member: BTreeSet<&str> = installed.iter().map(|h| h.label.as_str()).collect();
    let mut hosts: Vec<HostStatus> = planned
        .iter()
        .map(|h| HostStatus {
            membership: match stage {
                Stage::Succeeded => Some(MEMBER.into()),
                _ if was_member.contains(h.label.as_str()) => Some(MEMBER.into()),
                Stage::Running => Some(JOINING.into()),
                Stage::Waiting | Stage::Failed => None,
            },
            ..h.clone()
        })
        .collect();
    let gone = match stage {
        Stage::Waiting => LEAVING,
        Stage::Running | Stage::Failed => REMOVING,
        Stage::Succeeded => REMOVED,
    };
    let mut leaving: Vec<HostStatus> = installed
        .iter()
        .filter(|h| !listed.contains(h.label.as_str()))
        .map(|h| HostStatus {
            membership: Some(gone.into()),
            ..h.clone()
        })
        .collect();
    if same_job {
        for h in shown {
            let removed = h.membership.as_deref() == Some(REMOVED);
            if removed
                && !listed.contains(h.label.as_str())
                && !leaving.iter().any(|l| l.label == h.label)
            {
                leaving.push(h.clone());
            }
        }
    }
    hosts.extend(leaving);
    let (installed, release) = if stage == Stage::Succeeded {
        let kept: BTreeSet<&str> = planned
            .iter()
            .filter_map(|h| h.bare_metal_host.as_deref())
            .collect();
        (
            planned
                .iter()
                .map(|h| HostStatus {
                    membership: None,
                    ..h.clone()
                })
                .collect(),
            ours.iter()
                .filter(|b| !kept.contains(b.as_str()))
                .cloned()
                .collect(),
        )
    } else {
        (installed.to_vec(), Vec::new())
    };
    Membership {
        hosts,
        installed,
        release,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(label: &str, bmh: &str) -> HostStatus {
        HostStatus {
            label: label.into(),
            role: "worker".into(),
            mac_address: "52:54:00:00:00:01".into(),
            bare_metal_host: Some(bmh.into()),
            ip: Some("10.0.0.1".into()),
            state: Some("provisioned".into()),
            membership: None,
        }
    }

    fn said(m: &Membership) -> Vec<(String, Option<String>)> {
        m.hosts
            .iter()
            .map(|h| (h.label.clone(), h.membership.clone()))
            .collect()
    }

    fn of(pairs: &[(&str, Option<&str>)]) -> Vec<(String, Option<String>)> {
        pairs
            .iter()
            .map(|(l, m)| (l.to_string(), m.map(str::to_owned)))
            .collect()
    }

    #[test]
    fn a_first_install_joins_every_host_and_makes_them_members() {
        let planned = [host("master-0", "a"), host("worker-0", "b")];
        let running = membership(&planned, &[], (&[], true), Stage::Running, &[]);
        assert_eq!(
            said(&running),
            of(&[("master-0", Some(JOINING)), ("worker-0", Some(JOINING))])
        );
        assert!(running.installed.is_empty() && running.release.is_empty());
        let ours = ["a".to_owned(), "b".to_owned()];
        let done = membership(&planned, &[], (&[], true), Stage::Succeeded, &ours);
        assert_eq!(
            said(&done),
            of(&[("master-0", Some(MEMBER)), ("worker-0", Some(MEMBER))])
        );
        assert_eq!(done.installed.len(), 2);
        assert!(done.installed.iter().all(|h| h.membership.is_none()));
        assert!(done.release.is_empty());
    }

    #[test]
    fn a_host_taken_out_leaves_is_removed_and_released() {
        let installed = [host("master-0", "a"), host("worker-0", "b")];
        let planned = [host("master-0", "a")];
        let ours = ["a".to_owned(), "b".to_owned()];
        let waiting = membership(&planned, &installed, (&[], false), Stage::Waiting, &ours);
        assert_eq!(
            said(&waiting),
            of(&[("master-0", Some(MEMBER)), ("worker-0", Some(LEAVING))])
        );
        assert!(
            waiting.release.is_empty(),
            "nothing released before the Job"
        );
        let running = membership(&planned, &installed, (&[], false), Stage::Running, &ours);
        assert_eq!(
            said(&running),
            of(&[("master-0", Some(MEMBER)), ("worker-0", Some(REMOVING))])
        );
        assert_eq!(running.installed, installed, "members until a Job finishes");
        let failed = membership(&planned, &installed, (&[], true), Stage::Failed, &ours);
        assert_eq!(failed.hosts[1].membership.as_deref(), Some(REMOVING));
        assert!(failed.release.is_empty());
        let done = membership(
            &planned,
            &installed,
            (&running.hosts, true),
            Stage::Succeeded,
            &ours,
        );
        assert_eq!(
            said(&done),
            of(&[("master-0", Some(MEMBER)), ("worker-0", Some(REMOVED))])
        );
        assert_eq!(done.release, ["b"]);
        assert_eq!(done.installed.len(), 1);
        // The next reconcile of the same generation: still shown as removed, nothing more to release.
        let again = membership(
            &planned,
            &done.installed,
            (&done.hosts, true),
            Stage::Succeeded,
            &["a".to_owned()],
        );
        assert_eq!(said(&again), said(&done));
        assert!(again.release.is_empty());
        // A new generation's Job: the removed host is history.
        let next = membership(
            &planned,
            &done.installed,
            (&done.hosts, false),
            Stage::Running,
            &["a".to_owned()],
        );
        assert_eq!(said(&next), of(&[("master-0", Some(MEMBER))]));
    }

    #[test]
    fn a_host_added_to_a_cluster_joins_beside_the_members() {
        let installed = [host("master-0", "a")];
        let planned = [host("master-0", "a"), host("worker-0", "b")];
        let running = membership(&planned, &installed, (&[], false), Stage::Running, &[]);
        assert_eq!(
            said(&running),
            of(&[("master-0", Some(MEMBER)), ("worker-0", Some(JOINING))])
        );
        let failed = membership(&planned, &installed, (&[], true), Stage::Failed, &[]);
        assert_eq!(
            said(&failed),
            of(&[("master-0", Some(MEMBER)), ("worker-0", None)])
        );
    }
}
