//! A package installer run's rollout over the hosts, apart from SSH: how many hosts at once, the stop at the
//! first failure, and the per-host report the Software shows.

use std::cell::RefCell;

use futures_util::{stream, StreamExt as _};

use crate::controllers::common::host_report::{HostReport, HostState};
use crate::installer::inventory::Host;

/// How one package went on one host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    pub host: String,
    pub package: String,
    /// What the host said it did (`deb hello 1.0 installed`, `binary /usr/local/bin/x already installed`), or
    /// why it failed (the step and the output's tail).
    pub result: Result<String, String>,
}

/// What a run did: every (host, package) it tried, in inventory order, and the hosts it did not start because an
/// earlier one failed (with that host's name).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Run {
    pub outcomes: Vec<Outcome>,
    pub skipped: Vec<(String, String)>,
}

impl Run {
    /// One line per host for the Software's status: `Failed` if a package failed there, `Updated` if one was
    /// installed, `Unchanged` if all were already there, `Skipped` if it was not started.
    pub fn report(&self) -> Vec<HostReport> {
        let mut hosts: Vec<HostReport> = Vec::new();
        for o in &self.outcomes {
            let (state, said) = match &o.result {
                Err(why) => (HostState::Failed, format!("{}: {why}", o.package)),
                Ok(done) if done.ends_with("already installed") => {
                    (HostState::Unchanged, done.clone())
                }
                Ok(done) => (HostState::Updated, done.clone()),
            };
            match hosts.iter_mut().find(|h| h.host == o.host) {
                Some(h) => {
                    h.state = h.state.max(state);
                    h.detail = format!("{}; {said}", h.detail);
                }
                None => hosts.push(HostReport {
                    host: o.host.clone(),
                    state,
                    detail: said,
                }),
            }
        }
        hosts.extend(self.skipped.iter().map(|(host, first)| HostReport {
            host: host.clone(),
            state: HostState::Skipped,
            detail: format!("not started: {first} failed first"),
        }));
        hosts
    }
}

/// A host's packages' outcomes, or the host skipped: its name and the host that failed first.
type Tried = Result<Vec<Outcome>, (String, String)>;

/// The rollout's order and its stop, apart from SSH: `install` on each host of `hosts` (with its packages), at
/// most `at_once` at a time, no new host once one has failed.
pub async fn roll_out<'h, F, Fut>(
    hosts: &'h [(&'h Host, Vec<usize>)],
    at_once: usize,
    install: F,
) -> Run
where
    F: Fn(&'h Host, &'h [usize]) -> Fut,
    Fut: std::future::Future<Output = Vec<Outcome>>,
{
    let first_failed: RefCell<Option<String>> = RefCell::new(None);
    let mut done: Vec<(usize, Tried)> = stream::iter(hosts.iter().enumerate())
        .map(|(i, (host, mine))| {
            let (first_failed, install) = (&first_failed, &install);
            async move {
                let stopped = first_failed.borrow().clone();
                if let Some(first) = stopped {
                    return (i, Err((host.name.clone(), first)));
                }
                let outcomes = install(host, mine).await;
                if outcomes.iter().any(|o| o.result.is_err()) {
                    first_failed
                        .borrow_mut()
                        .get_or_insert_with(|| host.name.clone());
                }
                (i, Ok(outcomes))
            }
        })
        .buffer_unordered(at_once.max(1))
        .collect()
        .await;
    done.sort_by_key(|(i, _)| *i);
    let mut run = Run::default();
    for (_, r) in done {
        match r {
            Ok(outcomes) => run.outcomes.extend(outcomes),
            Err(skipped) => run.skipped.push(skipped),
        }
    }
    run
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::installer::inventory::Inventory;

    /// `n` (at least one) hosts `h0`…, `h0` the control plane, all of them nodes.
    fn hosts(n: usize) -> Inventory {
        let mut text = String::from("[all]\n");
        for i in 0..n {
            text.push_str(&format!("h{i} ansible_host=10.0.0.{}\n", i + 1));
        }
        text.push_str("[kube_control_plane]\nh0\n[kube_node]\n");
        for i in 0..n {
            text.push_str(&format!("h{i}\n"));
        }
        Inventory::parse(&text).unwrap()
    }

    /// A rollout of `n` hosts, `at_once` at a time, where the hosts in `failing` fail: the run, and the most
    /// hosts that were under way at once. Each fake install yields a few times so that the others interleave.
    fn rollout(n: usize, at_once: usize, failing: &[usize]) -> (Run, usize) {
        let inv = hosts(n);
        let hosts: Vec<(&Host, Vec<usize>)> =
            inv.members().into_iter().map(|h| (h, vec![0])).collect();
        let (busy, most) = (std::cell::Cell::new(0), std::cell::Cell::new(0));
        let run = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(roll_out(&hosts, at_once, |host, _| {
                let (busy, most) = (&busy, &most);
                async move {
                    busy.set(busy.get() + 1);
                    most.set(most.get().max(busy.get()));
                    for _ in 0..3 {
                        tokio::task::yield_now().await;
                    }
                    busy.set(busy.get() - 1);
                    let i: usize = host.name[1..].parse().unwrap();
                    let result = match failing.contains(&i) {
                        true => Err("exit status 100".to_owned()),
                        false => Ok("deb hello 1.1 installed".to_owned()),
                    };
                    vec![Outcome {
                        host: host.name.clone(),
                        package: "hello".into(),
                        result,
                    }]
                }
            }));
        (run, most.get())
    }

    #[test]
    fn hosts_go_one_at_a_time_by_default_and_the_first_failure_stops_the_rest() {
        let (run, most) = rollout(4, 1, &[1]);
        assert_eq!(most, 1);
        let ran: Vec<&str> = run.outcomes.iter().map(|o| o.host.as_str()).collect();
        assert_eq!(ran, ["h0", "h1"]);
        assert_eq!(
            run.skipped,
            [("h2".into(), "h1".into()), ("h3".into(), "h1".into())]
        );
        let report = run.report();
        let states: Vec<(&str, HostState)> =
            report.iter().map(|h| (h.host.as_str(), h.state)).collect();
        assert_eq!(
            states,
            [
                ("h0", HostState::Updated),
                ("h1", HostState::Failed),
                ("h2", HostState::Skipped),
                ("h3", HostState::Skipped)
            ]
        );
        assert_eq!(report[1].detail, "hello: exit status 100");
        assert_eq!(report[2].detail, "not started: h1 failed first");
    }

    #[test]
    fn a_host_s_state_is_its_worst_package_s() {
        let run = Run {
            outcomes: vec![
                Outcome {
                    host: "m".into(),
                    package: "a".into(),
                    result: Ok("deb a 1.0 already installed".into()),
                },
                Outcome {
                    host: "m".into(),
                    package: "b".into(),
                    result: Ok("binary /usr/local/bin/b installed".into()),
                },
                Outcome {
                    host: "w".into(),
                    package: "a".into(),
                    result: Ok("deb a 1.0 already installed".into()),
                },
                Outcome {
                    host: "x".into(),
                    package: "a".into(),
                    result: Err("unreachable".into()),
                },
                Outcome {
                    host: "x".into(),
                    package: "b".into(),
                    result: Ok("binary /usr/local/bin/b installed".into()),
                },
            ],
            skipped: vec![],
        };
        let report = run.report();
        assert_eq!(report[0].state, HostState::Updated);
        assert_eq!(
            report[0].detail,
            "deb a 1.0 already installed; binary /usr/local/bin/b installed"
        );
        assert_eq!(report[1].state, HostState::Unchanged);
        assert_eq!(report[2].state, HostState::Failed);
    }

    proptest::proptest! {
        /// Never more hosts under way than `maxUnavailable`; every host is either tried once or skipped once;
        /// none is skipped without a failure, and none started after the first failure was seen (with one at a
        /// time: exactly the hosts after the first failing one are skipped).
        #[test]
        fn a_rollout_never_disrupts_more_hosts_than_allowed(
            n in 1..12usize,
            at_once in 1..5usize,
            failing in proptest::collection::btree_set(0..12usize, 0..3),
        ) {
            let failing: Vec<usize> = failing.into_iter().collect();
            let (run, most) = rollout(n, at_once, &failing);
            proptest::prop_assert!(most <= at_once);
            proptest::prop_assert_eq!(run.outcomes.len() + run.skipped.len(), n);
            let failed_any = run.outcomes.iter().any(|o| o.result.is_err());
            proptest::prop_assert!(run.skipped.is_empty() || failed_any);
            if at_once == 1 {
                let first = failing.iter().copied().filter(|&i| i < n).min();
                let tried = first.map_or(n, |f| f + 1);
                proptest::prop_assert_eq!(run.outcomes.len(), tried);
            }
        }
    }
}
