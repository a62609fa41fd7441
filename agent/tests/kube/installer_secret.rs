//! `install-cluster`'s last step on the real apiserver: the workload cluster's kubeconfig written into the
//! BPA's Secret by server-side apply, created by the first run and updated by the next.

use crate::support::kube::env;
use foothold_agent::installer::cluster::publish;
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;

#[tokio::test]
async fn the_kubeconfig_secret_is_created_then_updated() {
    let env = env();
    let client = env.client().await;
    let ns = env.namespace(&client, "installer-secret").await;
    let secrets = Api::<Secret>::namespaced(client.clone(), &ns);
    for text in ["first kubeconfig\n", "second kubeconfig\n"] {
        publish(client.clone(), &ns, "c1-kubeconfig", text)
            .await
            .unwrap();
        let s = secrets.get("c1-kubeconfig").await.unwrap();
        assert_eq!(s.data.unwrap()["kubeconfig"].0, text.as_bytes());
    }
}
