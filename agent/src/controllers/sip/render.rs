//! The SIP services' objects, pure and typed: from the SIPCluster, the planned roles, the observed hosts and
//! the auth Secrets to the Secrets, ConfigMaps, Deployments and Services the reconcile applies (with
//! [`crate::controllers::common::Owned`], which adds the owner's labels and reference), and the endpoints the
//! status reports. Nothing here talks to the apiserver; an `Err` is a spec or host data that cannot make the
//! service, which only a change fixes.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{
    ConfigMap, ConfigMapVolumeSource, Container, ContainerPort, EnvVar, HostAlias, PodSpec,
    PodTemplateSpec, Secret, SecretVolumeSource, Service, ServicePort, ServiceSpec, Volume,
    VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;
use serde_json::json;

use super::configs::{self, Node};
use super::observe::{AuthSecrets, Observed};
use super::plan::OWNER_LABEL;
use crate::controllers::common::child_name;
use crate::controllers::common::document::json_or_yaml;
use crate::crd::sip::{Auth, JumpHost, RoleHosts, SIPCluster, ServiceCommon, ServiceEndpoint};

/// On every service's pods: which service they run.
pub const SERVICE_LABEL: &str = "sip.airshipit.org/service";
/// The tenant Kubernetes API port the control-plane load balancer forwards to.
const API_PORT: u16 = 6443;
/// Dex's port.
const DEX_PORT: u16 = 5556;
/// Most ports one worker load balancer forwards.
const MAX_WORKER_PORTS: i32 = 200;

/// The objects of the services, by kind, and their endpoints.
#[derive(Debug, Default)]
pub struct Desired {
    pub secrets: Vec<Secret>,
    pub config_maps: Vec<ConfigMap>,
    pub deployments: Vec<Deployment>,
    pub services: Vec<Service>,
    pub endpoints: Vec<ServiceEndpoint>,
}

/// Everything the spec's services need. `auth` holds each `auth[i]`'s Secrets, in order.
pub fn services(
    sip: &SIPCluster,
    ns: &str,
    roles: &BTreeMap<String, RoleHosts>,
    by_name: &BTreeMap<String, &Observed>,
    auth: &[AuthSecrets],
) -> Result<Desired, String> {
    let sip_name = sip.name_any();
    let none = RoleHosts::default();
    let cp = roles.get("ControlPlane").unwrap_or(&none);
    let workers = roles.get("Worker").unwrap_or(&none);
    let pods = Pods { sip: &sip_name };
    let mut d = Desired::default();
    for (i, lb) in sip
        .spec
        .services
        .load_balancer_control_plane
        .iter()
        .enumerate()
    {
        let name = service_name(&sip_name, "lb-control-plane", i);
        let listen = port(lb.node_port, &name)?;
        let nodes = nodes(
            &[cp],
            false,
            by_name,
            lb.common.node_interface_id.as_deref(),
            &name,
        )?;
        let cfg = configs::haproxy_control_plane(&nodes, listen, API_PORT);
        pods.haproxy(&mut d, &name, &lb.common, &cfg, &[listen]);
        d.services.push(node_port_service(
            &name,
            &lb.common,
            &[(listen, Some(listen))],
        ));
        d.endpoints.push(endpoint(
            "loadBalancerControlPlane",
            &name,
            ns,
            listen,
            vec![lb.node_port],
        ));
    }
    for (i, lb) in sip.spec.services.load_balancer_worker.iter().enumerate() {
        let name = service_name(&sip_name, "lb-worker", i);
        let (start, end) = match (&lb.node_port_range, lb.node_port) {
            (Some(r), None) => (r.start, r.end),
            (None, Some(p)) => (p, p),
            (Some(_), Some(_)) => {
                return Err(format!("{name}: give nodePortRange or nodePort, not both"))
            }
            (None, None) => return Err(format!("{name}: nodePortRange or nodePort is required")),
        };
        if end < start || end - start >= MAX_WORKER_PORTS {
            return Err(format!(
                "{name}: nodePortRange {start}-{end} must be ascending and span at most {MAX_WORKER_PORTS} ports"
            ));
        }
        let (s, e) = (port(start, &name)?, port(end, &name)?);
        let nodes = nodes(
            &[workers],
            false,
            by_name,
            lb.common.node_interface_id.as_deref(),
            &name,
        )?;
        let cfg = configs::haproxy_workers(&nodes, s, e);
        let ports: Vec<u16> = (s..=e).collect();
        pods.haproxy(&mut d, &name, &lb.common, &cfg, &ports);
        let svc_ports: Vec<(u16, Option<u16>)> = ports.iter().map(|p| (*p, Some(*p))).collect();
        d.services
            .push(node_port_service(&name, &lb.common, &svc_ports));
        d.endpoints.push(endpoint(
            "loadBalancerWorker",
            &name,
            ns,
            s,
            (start..=end).collect(),
        ));
    }
    for (i, jh) in sip.spec.services.jump_host.iter().enumerate() {
        let name = service_name(&sip_name, "jump-host", i);
        pods.jump_host(&mut d, ns, &name, jh, &[cp, workers], by_name)?;
    }
    for (i, a) in sip.spec.services.auth.iter().enumerate() {
        let name = service_name(&sip_name, "auth", i);
        let secrets = auth.get(i).cloned().unwrap_or_default();
        pods.dex(&mut d, ns, &name, a, &secrets)?;
    }
    Ok(d)
}

/// `<sip>-<kind>` for the first service of a kind, `<sip>-<kind>-<i>` for the others.
fn service_name(sip: &str, kind: &str, i: usize) -> String {
    if i == 0 {
        child_name(sip, kind)
    } else {
        child_name(sip, &format!("{kind}-{i}"))
    }
}

/// The nodes of `roles` (active hosts; standbys too when `with_standby`), with their address on `interface`.
fn nodes(
    roles: &[&RoleHosts],
    with_standby: bool,
    by_name: &BTreeMap<String, &Observed>,
    interface: Option<&str>,
    service: &str,
) -> Result<Vec<Node>, String> {
    let mut out = Vec::new();
    for rh in roles {
        let names = rh
            .active
            .iter()
            .chain(if with_standby { &rh.standby[..] } else { &[] });
        for host in names {
            let o = by_name[host];
            let ip = o
                .network_data
                .as_ref()
                .map_err(Clone::clone)
                .and_then(|text| configs::network_data_ip(text, interface))
                .map_err(|e| format!("{service}: host {host}: {e}"))?;
            out.push(Node {
                name: o.bmh.name_any(),
                ip,
            });
        }
    }
    Ok(out)
}

fn port(p: i32, what: &str) -> Result<u16, String> {
    u16::try_from(p)
        .ok()
        .filter(|p| *p > 0)
        .ok_or_else(|| format!("{what}: port {p} is out of range"))
}

fn config_hash(parts: &[&str]) -> String {
    use sha2::Digest as _;
    let mut h = sha2::Sha256::new();
    for p in parts {
        h.update(p.as_bytes());
        h.update([0]);
    }
    hex::encode(&h.finalize()[..8])
}

fn named(name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_owned()),
        ..ObjectMeta::default()
    }
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn opaque(name: &str, data: &[(&str, &str)]) -> Secret {
    Secret {
        metadata: named(name),
        type_: Some("Opaque".into()),
        string_data: Some(labels(data)),
        ..Secret::default()
    }
}

fn secret_volume(name: &str, secret: &str, mode: Option<i32>) -> Volume {
    Volume {
        name: name.into(),
        secret: Some(SecretVolumeSource {
            secret_name: Some(secret.into()),
            default_mode: mode,
            ..SecretVolumeSource::default()
        }),
        ..Volume::default()
    }
}

fn mount(name: &str, path: &str) -> VolumeMount {
    VolumeMount {
        name: name.into(),
        mount_path: path.into(),
        read_only: Some(true),
        ..VolumeMount::default()
    }
}

fn tcp(port: u16) -> ContainerPort {
    ContainerPort {
        container_port: i32::from(port),
        protocol: Some("TCP".into()),
        ..ContainerPort::default()
    }
}

/// The Deployments of one SIPCluster's services.
struct Pods<'a> {
    sip: &'a str,
}

impl Pods<'_> {
    /// One replica of `container` on the service's nodes, rolled when `hash` (of its configuration) changes.
    fn deployment(
        &self,
        name: &str,
        common: &ServiceCommon,
        hash: &str,
        container: Container,
        volumes: Vec<Volume>,
        host_aliases: Vec<HostAlias>,
    ) -> Deployment {
        Deployment {
            metadata: named(name),
            spec: Some(DeploymentSpec {
                replicas: Some(1),
                selector: LabelSelector {
                    match_labels: Some(labels(&[(SERVICE_LABEL, name)])),
                    ..LabelSelector::default()
                },
                template: PodTemplateSpec {
                    metadata: Some(ObjectMeta {
                        labels: Some(labels(&[(SERVICE_LABEL, name), (OWNER_LABEL, self.sip)])),
                        // A changed configuration rolls the pods.
                        annotations: Some(labels(&[("sip.airshipit.org/config-hash", hash)])),
                        ..ObjectMeta::default()
                    }),
                    spec: Some(PodSpec {
                        node_selector: (!common.node_labels.is_empty())
                            .then(|| common.node_labels.clone()),
                        containers: vec![container],
                        volumes: Some(volumes),
                        host_aliases: (!host_aliases.is_empty()).then_some(host_aliases),
                        ..PodSpec::default()
                    }),
                },
                ..DeploymentSpec::default()
            }),
            ..Deployment::default()
        }
    }

    /// A load balancer: its `haproxy.cfg` Secret and the HAProxy Deployment that mounts it.
    fn haproxy(
        &self,
        d: &mut Desired,
        name: &str,
        common: &ServiceCommon,
        cfg: &str,
        ports: &[u16],
    ) {
        d.secrets.push(opaque(name, &[("haproxy.cfg", cfg)]));
        d.deployments.push(self.deployment(
            name,
            common,
            &config_hash(&[cfg]),
            Container {
                name: "haproxy".into(),
                image: Some(common.image.clone()),
                ports: Some(ports.iter().copied().map(tcp).collect()),
                volume_mounts: Some(vec![mount("config", "/usr/local/etc/haproxy")]),
                ..Container::default()
            },
            vec![secret_volume("config", name, None)],
            vec![],
        ));
    }

    /// The jump host: a Secret of the hosts' BMCs and an `ssh_config`, a ConfigMap of authorized keys, the
    /// Deployment (every host by name through hostAliases) and its Service on port 22.
    fn jump_host(
        &self,
        d: &mut Desired,
        ns: &str,
        name: &str,
        jh: &JumpHost,
        roles: &[&RoleHosts],
        by_name: &BTreeMap<String, &Observed>,
    ) -> Result<(), String> {
        let nodes = nodes(
            roles,
            true,
            by_name,
            jh.common.node_interface_id.as_deref(),
            name,
        )?;
        let mut hosts = Vec::new();
        for rh in roles {
            for host in rh.active.iter().chain(&rh.standby) {
                let o = by_name[host];
                let bmc = o
                    .bmc
                    .as_ref()
                    .map_err(|e| format!("{name}: host {host}: {e}"))?;
                hosts.push(json!({"name": o.bmh.name_any(),
                                  "bmc": {"ip": bmc.ip, "username": bmc.username, "password": bmc.password}}));
            }
        }
        let hosts = serde_json::to_string_pretty(&hosts).expect("JSON values serialize");
        let ssh_config = configs::ssh_config(&nodes, "root", "/etc/foothold/ssh/id_rsa");
        let keys = jh
            .ssh_authorized_keys
            .iter()
            .map(|k| format!("{}\n", k.trim()))
            .collect::<String>();
        let keys_name = child_name(name, "keys");
        d.secrets.push(opaque(
            name,
            &[("hosts", &hosts), ("ssh_config", &ssh_config)],
        ));
        d.config_maps.push(ConfigMap {
            metadata: named(&keys_name),
            data: Some(labels(&[("authorized_keys", &keys)])),
            ..ConfigMap::default()
        });
        let mut volumes = vec![
            secret_volume("jump", name, Some(0o400)),
            Volume {
                name: "keys".into(),
                config_map: Some(ConfigMapVolumeSource {
                    name: keys_name.clone(),
                    ..ConfigMapVolumeSource::default()
                }),
                ..Volume::default()
            },
        ];
        let mut mounts = vec![
            mount("jump", "/etc/foothold/jump"),
            mount("keys", "/etc/foothold/authorized_keys"),
        ];
        if let Some(private) = &jh.node_ssh_private_keys {
            volumes.push(secret_volume("ssh", private, Some(0o400)));
            mounts.push(mount("ssh", "/etc/foothold/ssh"));
        }
        // One alias per address with every host name at it (the API keys hostAliases by ip).
        let mut aliases: Vec<HostAlias> = Vec::new();
        for n in &nodes {
            let ip = n.ip.to_string();
            match aliases.iter_mut().find(|a| a.ip == ip) {
                Some(a) => a
                    .hostnames
                    .get_or_insert_with(Vec::new)
                    .push(n.name.clone()),
                None => aliases.push(HostAlias {
                    ip,
                    hostnames: Some(vec![n.name.clone()]),
                }),
            }
        }
        let bmc_proxy = jh.bmc.as_ref().is_some_and(|b| b.proxy);
        d.deployments.push(self.deployment(
            name,
            &jh.common,
            &config_hash(&[&hosts, &ssh_config, &keys]),
            Container {
                name: "jump-host".into(),
                image: Some(jh.common.image.clone()),
                env: Some(vec![EnvVar {
                    name: "BMC_PROXY".into(),
                    value: Some(bmc_proxy.to_string()),
                    ..EnvVar::default()
                }]),
                ports: Some(vec![tcp(22)]),
                volume_mounts: Some(mounts),
                ..Container::default()
            },
            volumes,
            aliases,
        ));
        let node_port = jh.node_port.map(|p| port(p, name)).transpose()?;
        d.services
            .push(node_port_service(name, &jh.common, &[(22, node_port)]));
        d.endpoints.push(endpoint(
            "jumpHost",
            name,
            ns,
            22,
            jh.node_port.into_iter().collect(),
        ));
        Ok(())
    }

    /// Dex: its `config.yaml` Secret (static users and the LDAP bind password from `secrets`), the Deployment
    /// (with the TLS Secret when `caSecret` names one) and its Service.
    fn dex(
        &self,
        d: &mut Desired,
        ns: &str,
        name: &str,
        auth: &Auth,
        secrets: &AuthSecrets,
    ) -> Result<(), String> {
        let config = dex_config(ns, name, auth, secrets)?;
        d.secrets.push(opaque(name, &[("config.yaml", &config)]));
        let mut volumes = vec![secret_volume("config", name, None)];
        let mut mounts = vec![mount("config", "/etc/dex/cfg")];
        if let Some(ca) = &auth.ca_secret {
            volumes.push(secret_volume("tls", ca, None));
            mounts.push(mount("tls", "/etc/dex/tls"));
        }
        d.deployments.push(
            self.deployment(
                name,
                &auth.common,
                &config_hash(&[&config]),
                Container {
                    name: "dex".into(),
                    image: Some(auth.common.image.clone()),
                    args: Some(
                        ["dex", "serve", "/etc/dex/cfg/config.yaml"]
                            .map(String::from)
                            .to_vec(),
                    ),
                    ports: Some(vec![tcp(DEX_PORT)]),
                    volume_mounts: Some(mounts),
                    ..Container::default()
                },
                volumes,
                vec![],
            ),
        );
        let node_port = auth.node_port.map(|p| port(p, name)).transpose()?;
        d.services.push(node_port_service(
            name,
            &auth.common,
            &[(DEX_PORT, node_port)],
        ));
        d.endpoints.push(endpoint(
            "auth",
            name,
            ns,
            DEX_PORT,
            auth.node_port.into_iter().collect(),
        ));
        Ok(())
    }
}

/// A NodePort Service selecting the service's pods, a TCP port each (with its fixed node port, if any).
fn node_port_service(name: &str, common: &ServiceCommon, ports: &[(u16, Option<u16>)]) -> Service {
    Service {
        metadata: named(name),
        spec: Some(ServiceSpec {
            type_: Some("NodePort".into()),
            selector: Some(labels(&[(SERVICE_LABEL, name)])),
            cluster_ip: common.cluster_ip.clone(),
            ports: Some(
                ports
                    .iter()
                    .map(|(port, node_port)| ServicePort {
                        name: Some(format!("p{port}")),
                        port: i32::from(*port),
                        target_port: Some(IntOrString::Int(i32::from(*port))),
                        node_port: node_port.map(i32::from),
                        protocol: Some("TCP".into()),
                        ..ServicePort::default()
                    })
                    .collect(),
            ),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    }
}

fn endpoint(
    service: &str,
    name: &str,
    ns: &str,
    port: u16,
    node_ports: Vec<i32>,
) -> ServiceEndpoint {
    ServiceEndpoint {
        service: service.into(),
        address: format!("{name}.{ns}.svc:{port}"),
        node_ports,
    }
}

#[derive(serde::Deserialize)]
struct StaticUser {
    email: String,
    hash: String,
    #[serde(default)]
    username: Option<String>,
}

/// Dex's configuration (JSON, which is YAML: Dex reads it as its config.yaml): the static connector's users
/// (`users`: a list of `{email, hash, username}`) and the LDAP connector with its bind password.
fn dex_config(ns: &str, name: &str, auth: &Auth, secrets: &AuthSecrets) -> Result<String, String> {
    let read = |what: &Option<Result<String, String>>| match what {
        Some(Ok(text)) => Ok(text.clone()),
        Some(Err(why)) => Err(format!("{name}: {why}")),
        None => Ok(String::new()),
    };
    let tls = auth.ca_secret.is_some();
    let issuer = auth.issuer.clone().unwrap_or_else(|| {
        format!(
            "{}://{name}.{ns}.svc:{DEX_PORT}/dex",
            if tls { "https" } else { "http" }
        )
    });
    let mut config = json!({
        "issuer": issuer,
        "storage": {"type": "memory"},
        "oauth2": {"skipApprovalScreen": true},
        "web": if tls {
            json!({"https": format!("0.0.0.0:{DEX_PORT}"), "tlsCert": "/etc/dex/tls/tls.crt", "tlsKey": "/etc/dex/tls/tls.key"})
        } else {
            json!({"http": format!("0.0.0.0:{DEX_PORT}")})
        },
        "connectors": [],
    });
    if let Some(st) = &auth.static_connector {
        let text = read(&secrets.users)?;
        let users: Vec<StaticUser> = json_or_yaml(&text).map_err(|e| {
            format!(
                "{name}: Secret {ns}/{} key users: not a list of {{email, hash, username}}: {e}",
                st.users_secret
            )
        })?;
        config["enablePasswordDB"] = json!(true);
        config["staticPasswords"] = json!(users
            .iter()
            .map(|u| {
                let username = u
                    .username
                    .clone()
                    .unwrap_or_else(|| u.email.split('@').next().unwrap_or(&u.email).to_owned());
                json!({"email": u.email, "hash": u.hash.trim(), "username": username,
                       "userID": config_hash(&[&u.email])})
            })
            .collect::<Vec<_>>());
    }
    if let Some(ldap) = &auth.ldap {
        let password = read(&secrets.bind_password)?;
        let mut c = json!({
            "host": ldap.host, "insecureNoSSL": ldap.insecure_no_ssl,
            "userSearch": {"baseDN": ldap.user_base_dn, "filter": ldap.user_filter.clone().unwrap_or_default(),
                           "username": "uid", "idAttr": "uid", "emailAttr": "mail", "nameAttr": "cn"},
        });
        if let Some(dn) = &ldap.bind_dn {
            c["bindDN"] = json!(dn);
            c["bindPW"] = json!(password);
        }
        if let Some(g) = &ldap.group_base_dn {
            c["groupSearch"] = json!({"baseDN": g, "filter": "(objectClass=groupOfNames)",
                "userMatchers": [{"userAttr": "DN", "groupAttr": "member"}], "nameAttr": "cn"});
        }
        config["connectors"] = json!([{"type": "ldap", "id": "ldap", "name": "LDAP", "config": c}]);
    }
    Ok(serde_json::to_string_pretty(&config).expect("JSON values serialize"))
}
