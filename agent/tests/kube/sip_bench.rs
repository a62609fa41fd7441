//! The SIP benchmark (`scripts/bench-sip.sh`, ignored otherwise): the planner over a large pool, then a
//! 100-host SIPCluster on the real apiserver from creation to Ready.

use crate::sip::{claimed, hosts, ready, sip_cluster, start_agent, RACK};
use crate::support::kube::{env, until};
use foothold_agent::crd::sip::SIPCluster;
use kube::api::{Api, PostParams};
use serde_json::json;

/// Not a test: `scripts/bench-sip.sh` runs it (release build) and prints the numbers. Planning for 10,000 hosts
/// (target ≤ 100 ms) and a 100-host SIPCluster reconciled on the real apiserver (target ≤ 5 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: run by scripts/bench-sip.sh"]
async fn bench_sip() {
    use foothold_agent::controllers::sip::plan::{plan, Cluster, Host};
    use foothold_agent::crd::sip::NodeSet;
    use std::collections::BTreeMap;

    let runs: usize = std::env::var("RUNS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(5);
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };

    // 1. The planner: 10,000 hosts in 100 racks, 3+1 control plane and 90+6 workers spread by rack, a tenth of
    //    the pool claimed by other clusters.
    let pool: Vec<Host> = (0..10_000)
        .map(|i| {
            let mut labels = BTreeMap::from([
                ("pool".to_owned(), "sip".to_owned()),
                (RACK.to_owned(), format!("r{}", i % 100)),
            ]);
            if (i / 100) % 10 == 0 {
                labels.insert("sip.airshipit.org/cluster-namespace".into(), "other".into());
                labels.insert("sip.airshipit.org/cluster-name".into(), "other".into());
                labels.insert("sip.airshipit.org/node-type".into(), "Worker".into());
            }
            Host {
                name: format!("metal3/node-{i:05}"),
                labels,
                has_network_data: true,
                state: "available".into(),
                ..Host::default()
            }
        })
        .collect();
    let set = |active: i32, standby: i32| -> NodeSet {
        serde_json::from_value(
            json!({"labelSelector": {"matchLabels": {"pool": "sip"}}, "topologyKey": RACK,
                                      "count": {"active": active, "standby": standby}}),
        )
        .unwrap()
    };
    let nodes = BTreeMap::from([
        ("ControlPlane".to_owned(), set(3, 1)),
        ("Worker".to_owned(), set(90, 6)),
    ]);
    let confirmed = BTreeMap::new();
    let cluster = Cluster {
        namespace: "t",
        name: "big",
        nodes: &nodes,
        confirmed: &confirmed,
    };
    let mut plan_ms = Vec::new();
    for _ in 0..runs.max(5) {
        let t = std::time::Instant::now();
        let p = plan(&cluster, &pool);
        plan_ms.push(t.elapsed().as_secs_f64() * 1000.0);
        assert!(p.unschedulable.is_empty(), "{:?}", p.unschedulable);
        assert_eq!(p.claims.len(), 100);
    }
    let plan_ms = median(plan_ms);

    // 2. The reconciler: 100 hosts, one SIPCluster taking all of them, from creation to Ready.
    let env = env();
    let client = env.client().await;
    let mut reconcile_s = Vec::new();
    for run in 0..runs {
        let ns = env.namespace(&client, &format!("sip-bench-{run}")).await;
        hosts(&client, &ns, 100, 100).await;
        let tmp = tempfile::tempdir().unwrap();
        let _agent = start_agent(tmp.path(), &ns, "agent-b");
        let sips: Api<SIPCluster> = Api::namespaced(client.clone(), &ns);
        let services = json!({
            "loadBalancerControlPlane": [{"image": "haproxy:2.6", "nodePort": 30500 + run as i32}],
            "jumpHost": [{"image": "quay.io/airshipit/jump-host:latest"}],
        });
        // Wait until the agent leads, so its start-up is not measured.
        let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
            Api::namespaced(client.clone(), &ns);
        until("the agent leading", || async {
            leases.get_opt("foothold-agent-controllers").await.unwrap()
        })
        .await;
        let t = std::time::Instant::now();
        sips.create(
            &PostParams::default(),
            &sip_cluster("big", (3, 1), (90, 6), services),
        )
        .await
        .unwrap();
        until("Ready", || async {
            sips.get_opt("big")
                .await
                .unwrap()
                .filter(|s| ready(s).is_some_and(|r| r.0 == "True"))
        })
        .await;
        reconcile_s.push(t.elapsed().as_secs_f64());
        assert_eq!(claimed(&client, &ns, "big").await.len(), 100);
    }
    let reconcile_s = median(reconcile_s);
    println!();
    println!("runs: {runs} (medians)");
    println!("measure                                        value   target");
    println!(
        "plan 10,000 hosts (100 claims)              {plan_ms:>6.1} ms  <= 100 ms {}",
        if plan_ms <= 100.0 { "ok" } else { "MISSED" }
    );
    println!(
        "100-host SIPCluster, create to Ready         {reconcile_s:>6.2} s   <= 5 s {}",
        if reconcile_s <= 5.0 { "ok" } else { "MISSED" }
    );
}
