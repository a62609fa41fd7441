//! Jobs a reconciler runs (installers): the Job, typed, and its outcome from its conditions.

use k8s_openapi::api::batch::v1::Job;

pub enum JobOutcome {
    Running,
    Succeeded,
    Failed(String),
}

/// A Job's outcome from its conditions (the Job controller's, or a test's standing in for it).
pub fn job_outcome(job: &Job) -> JobOutcome {
    let conditions = job
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default();
    for c in &conditions {
        if c.status == "True" && (c.type_ == "Complete" || c.type_ == "SuccessCriteriaMet") {
            return JobOutcome::Succeeded;
        }
        if c.status == "True" && (c.type_ == "Failed" || c.type_ == "FailureTarget") {
            return JobOutcome::Failed(format!(
                "{}: {}",
                c.reason.clone().unwrap_or_else(|| "Failed".into()),
                c.message.clone().unwrap_or_default()
            ));
        }
    }
    JobOutcome::Running
}

/// The pods of Job `job` (the Job controller labels them `job-name`); None when they cannot be listed.
async fn pods_of(
    client: &kube::Client,
    ns: &str,
    job: &str,
) -> Option<Vec<k8s_openapi::api::core::v1::Pod>> {
    use kube::api::{Api, ListParams};
    let pods = Api::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(&format!("job-name={job}")))
        .await
        .ok()?;
    Some(pods.items)
}

/// What the last attempt of Job `job` said as it ended: its `installer` container's termination message (the
/// installer writes its failure there: host, step and cause), from the Job's newest pod that has one.
pub async fn last_words(client: &kube::Client, ns: &str, job: &str) -> Option<String> {
    let mut said: Vec<_> = pods_of(client, ns, job)
        .await?
        .iter()
        .filter_map(|p| {
            let status = p.status.as_ref()?;
            let c = status
                .container_statuses
                .as_ref()?
                .iter()
                .find(|c| c.name == "installer")?;
            let message = c.state.as_ref()?.terminated.as_ref()?.message.clone()?;
            let message = message.trim().to_owned();
            (!message.is_empty()).then(|| (p.metadata.creation_timestamp.clone(), message))
        })
        .collect();
    said.sort_by(|a, b| a.0.cmp(&b.0));
    said.pop().map(|(_, m)| m)
}

/// The reason an owner's `Installing` and not-ready conditions give while its installer cannot start.
pub const WAITING: &str = "InstallerWaiting";

/// Reasons the kubelet gives a waiting container that more waiting will not start: its image cannot be had, or
/// its configuration cannot be made. Only an operator ends them (pushes the image, fixes the registry or the
/// inputs), so an owner still `Installing` says which it is. (A pull's first failure, `ErrImagePull`, turns
/// into `ImagePullBackOff` while the kubelet retries.)
const CANNOT_START: &[&str] = &[
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "ErrImageNeverPull",
    "RegistryUnavailable",
    "SignatureValidationFailed",
    "CreateContainerConfigError",
    "CreateContainerError",
];

/// Why `pod`'s `installer` container cannot start, if it cannot: the kubelet's reason for keeping it waiting
/// (one of [`CANNOT_START`]), or the scheduler's for a pod no node can take.
pub fn why_waiting(pod: &k8s_openapi::api::core::v1::Pod) -> Option<String> {
    let status = pod.status.as_ref()?;
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    let waiting = status
        .container_statuses
        .iter()
        .flatten()
        .filter(|c| c.name == "installer")
        .find_map(|c| c.state.as_ref()?.waiting.clone())
        .filter(|w| {
            w.reason
                .as_deref()
                .is_some_and(|r| CANNOT_START.contains(&r))
        });
    if let Some(w) = waiting {
        let reason = w.reason.unwrap_or_default();
        return Some(match w.message.filter(|m| !m.is_empty()) {
            Some(m) => format!("pod {name}: {reason}: {m}"),
            None => format!("pod {name}: {reason}"),
        });
    }
    let unschedulable = status.conditions.iter().flatten().find(|c| {
        c.type_ == "PodScheduled"
            && c.status == "False"
            && c.reason.as_deref() == Some("Unschedulable")
    })?;
    Some(format!(
        "pod {name} cannot be scheduled: {}",
        unschedulable.message.as_deref().unwrap_or("Unschedulable")
    ))
}

/// Why Job `job`'s newest pod cannot start its installer ([`why_waiting`]), if it cannot. A Job whose pod waits
/// for an image that is not there is neither running nor failed, and stays so until someone acts.
pub async fn waiting(client: &kube::Client, ns: &str, job: &str) -> Option<String> {
    let pods = pods_of(client, ns, job).await?;
    let newest = pods.iter().max_by(|a, b| {
        a.metadata
            .creation_timestamp
            .cmp(&b.metadata.creation_timestamp)
    })?;
    why_waiting(newest)
}

/// The owner (a `K` named by the pod's `label`, in its namespace) of an installer pod: installer pods carry their
/// owner's name under its owner label ([`Installer::pod_labels`]), so a pod that starts or cannot start
/// re-plans its owner.
pub fn pod_owner<K>(
    label: &'static str,
) -> impl Fn(k8s_openapi::api::core::v1::Pod) -> Option<kube::runtime::reflector::ObjectRef<K>>
where
    K: kube::Resource<DynamicType = ()>,
{
    use kube::ResourceExt;
    move |pod| {
        let ns = pod.namespace()?;
        Some(kube::runtime::reflector::ObjectRef::new(pod.labels().get(label)?).within(&ns))
    }
}

/// Why a Job failed: what its last attempt said ([`last_words`]), then the reason from its conditions (`why`).
pub fn failure(why: &str, last_words: Option<&str>) -> String {
    match last_words {
        Some(w) => format!("{w} ({why})"),
        None => why.to_owned(),
    }
}

/// A ConfigMap holding one file an installer reads: `file` with `text`.
pub fn input(name: &str, file: &str, text: &str) -> k8s_openapi::api::core::v1::ConfigMap {
    k8s_openapi::api::core::v1::ConfigMap {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: Some(name.to_owned()),
            ..Default::default()
        },
        data: Some([(file.to_owned(), text.to_owned())].into()),
        ..Default::default()
    }
}

/// Where a file the installer reads comes from.
pub enum Source<'a> {
    ConfigMap(&'a str),
    /// A Secret, its files readable by the owner only.
    Secret(&'a str),
}

/// An installer Job (BPA's cluster installer, Software's package installer): one container, `installer`, run
/// once (two retries, none after it exits [`foothold_names::INSTALLER_EXIT_LASTING`]), with its inputs as
/// environment variables and read-only mounts.
pub struct Installer<'a> {
    pub name: &'a str,
    pub image: &'a str,
    /// Labels of the Job (its owner's are added when it is created).
    pub labels: &'a [(&'a str, &'a str)],
    /// Labels of its pod.
    pub pod_labels: &'a [(&'a str, &'a str)],
    /// The account it runs as; None: no account token at all (it talks to hosts, not to this apiserver).
    pub service_account: Option<&'a str>,
    pub env: &'a [(&'a str, &'a str)],
    /// `(volume name, mount path, source)`.
    pub mounts: &'a [(&'a str, &'a str, Source<'a>)],
}

/// An installer Job's environment `env`, with `SSH_HOST_CA` (the site SSH CA's public key) when there is one:
/// its hosts must then show that CA's certificates.
pub fn with_host_ca<'a>(
    mut env: Vec<(&'a str, &'a str)>,
    ca: Option<&'a str>,
) -> Vec<(&'a str, &'a str)> {
    if let Some(ca) = ca {
        env.push(("SSH_HOST_CA", ca));
    }
    env
}

/// The Job of `i`, typed.
pub fn installer_job(i: &Installer) -> Job {
    use k8s_openapi::api::batch::v1::{
        JobSpec, PodFailurePolicy, PodFailurePolicyOnExitCodesRequirement, PodFailurePolicyRule,
    };
    use k8s_openapi::api::core::v1::{
        ConfigMapVolumeSource, Container, EnvVar, PodSpec, PodTemplateSpec, SecretVolumeSource,
        Volume, VolumeMount,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    let map = |pairs: &[(&str, &str)]| {
        Some(
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        )
    };
    let volumes = i
        .mounts
        .iter()
        .map(|(name, _, source)| Volume {
            name: (*name).into(),
            config_map: match source {
                Source::ConfigMap(c) => Some(ConfigMapVolumeSource {
                    name: (*c).into(),
                    ..ConfigMapVolumeSource::default()
                }),
                Source::Secret(_) => None,
            },
            secret: match source {
                Source::Secret(s) => Some(SecretVolumeSource {
                    secret_name: Some((*s).into()),
                    default_mode: Some(0o400),
                    ..SecretVolumeSource::default()
                }),
                Source::ConfigMap(_) => None,
            },
            ..Volume::default()
        })
        .collect();
    let mounts = i
        .mounts
        .iter()
        .map(|(name, path, _)| VolumeMount {
            name: (*name).into(),
            mount_path: (*path).into(),
            read_only: Some(true),
            ..VolumeMount::default()
        })
        .collect();
    // An installer that says retrying cannot help fails the Job at once: its two retries would each cost a pod,
    // minutes of a busy appliance and the same answer.
    let lasting = PodFailurePolicyRule {
        action: "FailJob".into(),
        on_exit_codes: Some(PodFailurePolicyOnExitCodesRequirement {
            container_name: Some("installer".into()),
            operator: "In".into(),
            values: vec![foothold_names::INSTALLER_EXIT_LASTING.into()],
        }),
        on_pod_conditions: None,
    };
    Job {
        metadata: ObjectMeta {
            name: Some(i.name.into()),
            labels: map(i.labels),
            ..ObjectMeta::default()
        },
        spec: Some(JobSpec {
            backoff_limit: Some(2),
            pod_failure_policy: Some(PodFailurePolicy {
                rules: vec![lasting],
            }),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: map(i.pod_labels),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    restart_policy: Some("Never".into()),
                    service_account_name: i.service_account.map(Into::into),
                    automount_service_account_token: i.service_account.is_none().then_some(false),
                    containers: vec![Container {
                        name: "installer".into(),
                        image: Some(i.image.into()),
                        env: Some(
                            i.env
                                .iter()
                                .map(|(k, v)| EnvVar {
                                    name: (*k).into(),
                                    value: Some((*v).into()),
                                    ..EnvVar::default()
                                })
                                .collect(),
                        ),
                        volume_mounts: Some(mounts),
                        ..Container::default()
                    }],
                    volumes: Some(volumes),
                    ..PodSpec::default()
                }),
            },
            ..JobSpec::default()
        }),
        ..Job::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(status: serde_json::Value) -> k8s_openapi::api::core::v1::Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p-install-g1-x7k2p"},
            "spec": {"containers": [{"name": "installer"}]},
            "status": status,
        }))
        .unwrap()
    }

    fn waiting(container: &str, reason: &str, message: &str) -> k8s_openapi::api::core::v1::Pod {
        pod(
            serde_json::json!({"phase": "Pending", "containerStatuses": [{
            "name": container, "ready": false, "restartCount": 0, "image": "installer:1", "imageID": "",
            "state": {"waiting": {"reason": reason, "message": message}}}]}),
        )
    }

    #[test]
    fn an_installer_pod_maps_to_the_owner_its_label_names_in_its_namespace() {
        let owner = pod_owner::<k8s_openapi::api::core::v1::ConfigMap>("example.org/owner");
        let labelled: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p-install-g1-x7k2p", "namespace": "site",
                         "labels": {"example.org/owner": "p", "job-name": "p-install-g1"}}
        }))
        .unwrap();
        let to = owner(labelled.clone()).unwrap();
        assert_eq!(
            (to.name.as_str(), to.namespace.as_deref()),
            ("p", Some("site"))
        );
        let mut unlabelled = labelled;
        unlabelled.metadata.labels = None;
        assert!(owner(unlabelled).is_none());
    }

    #[test]
    fn an_installer_that_cannot_start_says_why_and_one_that_is_starting_does_not() {
        assert_eq!(
            why_waiting(&waiting(
                "installer",
                "ImagePullBackOff",
                "Back-off pulling image \"installer:1\""
            ))
            .as_deref(),
            Some(
                "pod p-install-g1-x7k2p: ImagePullBackOff: Back-off pulling image \"installer:1\""
            )
        );
        assert_eq!(
            why_waiting(&waiting("installer", "CreateContainerConfigError", "")).as_deref(),
            Some("pod p-install-g1-x7k2p: CreateContainerConfigError")
        );
        // Normal starting, another container, a running pod and no status at all say nothing.
        assert_eq!(
            why_waiting(&waiting("installer", "ContainerCreating", "")),
            None
        );
        assert_eq!(
            why_waiting(&waiting("sidecar", "ImagePullBackOff", "")),
            None
        );
        assert_eq!(
            why_waiting(&pod(serde_json::json!({"phase": "Running"}))),
            None
        );
        assert_eq!(
            why_waiting(&k8s_openapi::api::core::v1::Pod::default()),
            None
        );
        let unschedulable = pod(serde_json::json!({"phase": "Pending", "conditions": [{
            "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
            "message": "0/1 nodes are available: 1 node(s) had untolerated taint"}]}));
        assert_eq!(
            why_waiting(&unschedulable).as_deref(),
            Some("pod p-install-g1-x7k2p cannot be scheduled: 0/1 nodes are available: 1 node(s) had untolerated taint")
        );
    }

    #[test]
    fn an_installer_job_carries_its_contract_and_an_account_only_when_given_one() {
        let mounts = [
            (
                "inventory",
                "/etc/foothold/inventory",
                Source::ConfigMap("inv"),
            ),
            ("ssh", "/etc/foothold/ssh", Source::Secret("ssh-key")),
        ];
        let i = Installer {
            name: "p-install-g1",
            image: "installer:1",
            labels: &[("cluster", "c1")],
            pod_labels: &[("owner", "p")],
            service_account: None,
            env: &[("CLUSTER_NAME", "c1")],
            mounts: &mounts,
        };
        let job = installer_job(&i);
        let spec = job.spec.unwrap();
        assert_eq!(spec.backoff_limit, Some(2));
        let rules = spec.pod_failure_policy.unwrap().rules;
        let codes = rules[0].on_exit_codes.as_ref().unwrap();
        assert_eq!(
            (
                rules.len(),
                rules[0].action.as_str(),
                codes.container_name.as_deref(),
                codes.operator.as_str(),
                &codes.values[..]
            ),
            (1, "FailJob", Some("installer"), "In", &[3][..])
        );
        let pod = spec.template.spec.unwrap();
        assert_eq!(
            (
                pod.restart_policy.as_deref(),
                pod.automount_service_account_token
            ),
            (Some("Never"), Some(false))
        );
        let c = &pod.containers[0];
        assert_eq!(c.env.as_ref().unwrap()[0].value.as_deref(), Some("c1"));
        assert!(c
            .volume_mounts
            .as_ref()
            .unwrap()
            .iter()
            .all(|m| m.read_only == Some(true)));
        let volumes = pod.volumes.unwrap();
        assert_eq!(volumes[0].config_map.as_ref().unwrap().name, "inv");
        let secret = volumes[1].secret.as_ref().unwrap();
        assert_eq!(
            (secret.secret_name.as_deref(), secret.default_mode),
            (Some("ssh-key"), Some(0o400))
        );
        assert_eq!(job.metadata.labels.unwrap()["cluster"], "c1");

        let with_account = installer_job(&Installer {
            service_account: Some("p-installer"),
            ..i
        });
        let pod = with_account.spec.unwrap().template.spec.unwrap();
        assert_eq!(
            (
                pod.service_account_name.as_deref(),
                pod.automount_service_account_token
            ),
            (Some("p-installer"), None)
        );
    }
}
