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

/// What the last attempt of Job `job` said as it ended: its `installer` container's termination message (the
/// installer writes its failure there: host, step and cause), from the Job's newest pod that has one.
pub async fn last_words(client: &kube::Client, ns: &str, job: &str) -> Option<String> {
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::{Api, ListParams};
    let pods = Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(&format!("job-name={job}")))
        .await
        .ok()?;
    let mut said: Vec<_> = pods
        .items
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
