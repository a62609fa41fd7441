//! The agent's availability against a real kube-apiserver: one leader reconciles while a standby waits and
//! takes over when it dies, and the HTTP side serves while the apiserver is away, the controllers starting
//! when it appears.

use crate::bpa::{get_prov, one_master, start_agent, start_agent_with};
use crate::jobs::job_status;
use crate::software::{get_json, upload};
use crate::support;
use crate::support::kube::{env, until, WAIT};
use crate::support::Agent;

use foothold_agent::crd::metal3::BareMetalHost;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::{json, Value};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_leader_reconciles_and_a_standby_takes_over_when_it_dies() {
    let env = env();
    let client = env.client().await;
    let ns = env.namespace(&client, "bpa-leader").await;
    let tmp = tempfile::tempdir().unwrap();
    let mut first = start_agent(tmp.path(), &ns, "agent-1");
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);
    until("agent-1 leading", || async {
        leases
            .get_opt("foothold-agent-controllers")
            .await
            .unwrap()
            .filter(|l| {
                l.spec.as_ref().and_then(|s| s.holder_identity.as_deref()) == Some("agent-1")
            })
    })
    .await;
    let second = start_agent(tmp.path(), &ns, "agent-2");
    let readyz = |a: &Agent| -> Value {
        support::http()
            .get(&a.url("/readyz"))
            .call()
            .unwrap()
            .body_mut()
            .read_to_string()
            .map(|b| serde_json::from_str(&b).unwrap())
            .unwrap()
    };
    let standby = support::wait_for("agent-2 in standby", WAIT, || {
        let r = readyz(&second);
        (r["controllers"]["state"] == "standby" && r["controllers"]["leader"] == "agent-1")
            .then_some(r)
    });
    assert_eq!(standby["http"], "ok");
    assert_eq!(readyz(&first)["controllers"]["state"], "leading");

    let provs = one_master(
        &client,
        &ns,
        ("n", "02:00:00:00:00:0a", "10.0.0.10"),
        ("solo", "solo"),
        None,
    )
    .await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    until("the installer Job", || async {
        jobs.get_opt("solo-install-g1").await.unwrap()
    })
    .await;
    assert!(first
        .metrics()
        .contains("foothold_reconciles_total{controller=\"bpa\"}"));
    assert!(
        !second
            .metrics()
            .contains("foothold_reconciles_total{controller=\"bpa\"}"),
        "the standby reconciled"
    );
    assert!(second
        .metrics()
        .lines()
        .any(|l| l == "foothold_controller_leader 0"));
    // The leader counts the namespace's BareMetalHosts by state and error type; the standby counts none.
    let hosts = |a: &Agent, want: &str| {
        support::wait_for(&format!("{} reporting {want}", a.url("")), WAIT, || {
            a.metrics().lines().any(|l| l == want).then_some(())
        })
    };
    hosts(
        &first,
        "foothold_baremetalhosts{state=\"provisioned\",error_type=\"\"} 1",
    );
    assert!(
        !second.metrics().contains("foothold_baremetalhosts{"),
        "the standby counted hosts"
    );

    // The leader dies mid-flight; the standby takes the lease over and finishes the work.
    first.kill();
    until("agent-2 leading", || async {
        leases
            .get_opt("foothold-agent-controllers")
            .await
            .unwrap()
            .filter(|l| {
                l.spec.as_ref().and_then(|s| s.holder_identity.as_deref()) == Some("agent-2")
            })
    })
    .await;
    Api::<Secret>::namespaced(client.clone(), &ns).create(&PostParams::default(), &serde_json::from_value(json!({
        "metadata": {"name": "solo-kubeconfig"}, "stringData": {"kubeconfig": "apiVersion: v1\n"},
    })).unwrap()).await.unwrap();
    job_status(&client, &ns, "solo-install-g1", true).await;
    until("phase Ready", || async {
        get_prov(&provs, "solo")
            .await
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Ready"))
    })
    .await;
    assert!(second
        .metrics()
        .contains("foothold_reconciles_total{controller=\"bpa\"}"));
    // A host in error, as BMO would report it, is counted so by the new leader.
    Api::<BareMetalHost>::namespaced(client.clone(), &ns)
        .patch_status(
            "n",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"errorType": "provisioning error", "errorMessage": "image checksum"}})),
        )
        .await
        .unwrap();
    hosts(
        &second,
        "foothold_baremetalhosts{state=\"provisioned\",error_type=\"provisioning error\"} 1",
    );
    assert!(
        !second
            .metrics()
            .contains("foothold_baremetalhosts{state=\"provisioned\",error_type=\"\"}"),
        "the host is still counted without its error"
    );
    assert_eq!(
        jobs.list(&ListParams::default()).await.unwrap().items.len(),
        1,
        "exactly one installer Job"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_serves_while_the_apiserver_is_away_and_controllers_start_when_it_appears() {
    let env = env();
    let client = env.client().await;
    let ns = env.namespace(&client, "bpa-late").await;
    let tmp = tempfile::tempdir().unwrap();
    // The kubeconfig points at a port where nothing listens yet; later a proxy to the apiserver opens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let late = tmp.path().join("late.kubeconfig");
    let text = std::fs::read_to_string(env.agent_kubeconfig()).unwrap();
    assert!(text.contains(&env.server));
    std::fs::write(
        &late,
        text.replace(&env.server, &format!("https://127.0.0.1:{port}")),
    )
    .unwrap();
    let agent = start_agent_with(tmp.path(), &ns, "agent-late", &late);
    let readyz = || get_json(&agent, "/readyz");
    let r = support::wait_for("/readyz saying connecting", WAIT, || {
        let r = readyz();
        (r["controllers"]["state"] == "connecting" && r["controllers"]["error"] != "starting")
            .then_some(r)
    });
    assert_eq!(r["http"], "ok");
    assert!(
        r["controllers"]["error"]
            .as_str()
            .unwrap()
            .contains("apiserver unreachable"),
        "{r}"
    );
    // The registry and the REST API serve meanwhile.
    let v2 = support::http().get(&agent.url("/v2/")).call().unwrap();
    assert_eq!(v2.status(), 200);
    upload(&agent, "tenant-a", "late", "file", 3, b"abc");
    let status = get_json(&agent, "/v1/baremetalcluster/tenant-a/late/status");
    assert_eq!(status["kubernetes"]["state"], "disabled");

    // The apiserver appears: a plain TCP proxy to it on the kubeconfig's port.
    let upstream = env.server.trim_start_matches("https://").to_owned();
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .unwrap();
    let proxy = tokio::spawn(async move {
        loop {
            let (mut inbound, _) = listener.accept().await.unwrap();
            let upstream = upstream.clone();
            tokio::spawn(async move {
                if let Ok(mut outbound) = tokio::net::TcpStream::connect(&upstream).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    });
    support::wait_for("/readyz saying leading", WAIT, || {
        (readyz()["controllers"]["state"] == "leading").then_some(())
    });
    let provs = one_master(
        &client,
        &ns,
        ("l1", "02:00:00:00:03:01", "10.0.3.1"),
        ("late", "late"),
        None,
    )
    .await;
    until("the late agent reconciling", || async {
        get_prov(&provs, "late")
            .await
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Installing"))
    })
    .await;
    let status = get_json(&agent, "/v1/baremetalcluster/tenant-a/late/status");
    assert_eq!(status["kubernetes"]["state"], "ok");
    assert_eq!(status["provisioning"][0]["status"]["phase"], "Installing");
    proxy.abort();
}
