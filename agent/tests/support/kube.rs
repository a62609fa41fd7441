//! A real Kubernetes control plane for reconciler tests: etcd and kube-apiserver (the appliance's own, built from
//! `packages/appliance.yaml`'s pins by `scripts/kube-test-tools.sh`) on 127.0.0.1, started once per test binary, like
//! controller-runtime's envtest. There is no kubelet, scheduler or controller-manager: tests patch Job and
//! DaemonSet statuses themselves, and nothing is garbage-collected.
//!
//! The processes are started from a thread that lives as long as the test binary, with `PR_SET_PDEATHSIG`,
//! so they die with the binary however it ends; their directory is removed by the next binary that starts.

use super::free_port;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};

use super::{tool, wait_for};

/// The admin's static token (group `system:masters`).
pub const TOKEN: &str = "foothold-test-admin-token";

/// A user with no rights but those a test grants it with RBAC (`KubeEnv::restricted_kubeconfig`).
pub const RESTRICTED_USER: &str = "restricted";
const RESTRICTED_TOKEN: &str = "foothold-test-restricted-token";

#[derive(Clone)]
pub struct KubeEnv {
    /// A kubeconfig for the admin, for `foothold-agent serve --kubeconfig` and for test clients.
    pub kubeconfig: PathBuf,
    pub server: String,
    pub dir: PathBuf,
}

static ENV: OnceLock<KubeEnv> = OnceLock::new();
static NAMESPACES: AtomicU32 = AtomicU32::new(0);

/// The control plane of this test binary, started on first use with every Foothold CRD and Metal3's
/// BareMetalHost CRD installed and established.
pub fn env() -> &'static KubeEnv {
    ENV.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel();
        // The processes' parent-death signal fires when the thread that spawned them ends: this one never does.
        std::thread::Builder::new()
            .name("kube-test-env".into())
            .spawn(move || {
                let plane = ControlPlane::start(None);
                tx.send(plane.env.clone()).unwrap();
                let _plane = plane;
                loop {
                    std::thread::park();
                }
            })
            .unwrap();
        rx.recv()
            .expect("the Kubernetes test environment failed to start (see the panic above)")
    })
}

/// A control plane of one test's own, on a thread that lives until this is dropped (the processes'
/// parent-death signal fires when the thread that spawned them ends, as a blocking-pool thread may at any
/// idle moment).
pub struct OwnPlane {
    pub env: KubeEnv,
    _stop: std::sync::mpsc::Sender<()>,
}

impl OwnPlane {
    pub fn start(name: &'static str) -> OwnPlane {
        let (tx, rx) = std::sync::mpsc::channel();
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        std::thread::Builder::new()
            .name(format!("kube-test-{name}"))
            .spawn(move || {
                let plane = ControlPlane::start(Some(name));
                tx.send(plane.env.clone()).unwrap();
                // Until the sender drops.
                let _ = stopped.recv();
                drop(plane);
            })
            .unwrap();
        let env = rx
            .recv()
            .expect("the test's control plane failed to start (see the panic above)");
        OwnPlane { env, _stop: stop }
    }
}

impl KubeEnv {
    /// A client of the admin, bound to the calling runtime.
    pub async fn client(&self) -> kube::Client {
        client_of(&self.kubeconfig).await
    }
}

impl KubeEnv {
    /// [`KubeEnv::client`] without kube's own retries of 429, 503 and 504 answers: what the installer's client of
    /// a workload cluster is (it retries by itself, and a drain must see an eviction a budget refuses).
    pub async fn client_without_retries(&self) -> kube::Client {
        let kubeconfig = Kubeconfig::read_from(&self.kubeconfig).expect("reading the kubeconfig");
        let mut config =
            kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .expect("kubeconfig");
        config.default_retry = false;
        kube::Client::try_from(config).expect("client")
    }
}

/// A client of `kubeconfig`'s user, bound to the calling runtime.
pub async fn client_of(kubeconfig: &Path) -> kube::Client {
    let kubeconfig = Kubeconfig::read_from(kubeconfig).expect("reading the kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("kubeconfig");
    kube::Client::try_from(config).expect("client")
}

impl KubeEnv {
    /// A kubeconfig for [`RESTRICTED_USER`] (written once, beside the admin's).
    pub fn restricted_kubeconfig(&self) -> PathBuf {
        self.derived_kubeconfig("restricted", |user| user["token"] = RESTRICTED_TOKEN.into())
    }

    /// A kubeconfig for the agents under test: the admin's, impersonating [`AGENT_USER`] (written once).
    pub fn agent_kubeconfig(&self) -> PathBuf {
        self.derived_kubeconfig("agent", |user| user["as"] = AGENT_USER.into())
    }

    /// `kubeconfig-<name>` beside the admin's: the admin's with its user changed by `edit`, written once (whole:
    /// test binaries running at once may ask for it together).
    fn derived_kubeconfig(&self, name: &str, edit: impl Fn(&mut serde_json::Value)) -> PathBuf {
        let path = self.dir.join(format!("kubeconfig-{name}"));
        if !path.exists() {
            let mut config: serde_json::Value =
                serde_json::from_slice(&std::fs::read(&self.kubeconfig).unwrap()).unwrap();
            edit(&mut config["users"][0]["user"]);
            // One temporary file per writer: tests of one binary ask for it together too.
            static WRITERS: AtomicUsize = AtomicUsize::new(0);
            let tmp = self.dir.join(format!(
                "kubeconfig-{name}.{}.{}",
                std::process::id(),
                WRITERS.fetch_add(1, Ordering::Relaxed)
            ));
            std::fs::write(&tmp, config.to_string()).unwrap();
            std::fs::rename(&tmp, &path).unwrap();
        }
        path
    }

    /// A fresh namespace for one test, named after it.
    pub async fn namespace(&self, client: &kube::Client, test: &str) -> String {
        let n = NAMESPACES.fetch_add(1, Ordering::Relaxed);
        let name = format!("{}-{}-{n}", test.replace('_', "-"), std::process::id())
            .chars()
            .take(63)
            .collect::<String>()
            .trim_end_matches('-')
            .to_owned();
        let ns: Namespace = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name}
        }))
        .unwrap();
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .expect("creating the test namespace");
        name
    }
}

/// Removes directories left by earlier test binaries whose process is gone.
fn sweep_stale(parent: &Path) {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if let Some(pid) = name
            .strip_prefix("foothold-kube-")
            .map(|rest| rest.split('.').next().unwrap_or(rest))
        {
            if !Path::new("/proc").join(pid).exists() {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    }
}

fn spawn(cmd: &mut Command, log: &Path) -> Child {
    use std::os::unix::process::CommandExt;
    let out = std::fs::File::create(log).unwrap();
    cmd.stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out);
    // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd.spawn()
        .unwrap_or_else(|e| panic!("spawning {cmd:?}: {e}"))
}

/// etcd and kube-apiserver in `<tmp>/foothold-kube-<pid>[.<name>]`, killed when dropped. The shared [`env`]
/// is one; a test that restarts the apiserver starts its own.
pub struct ControlPlane {
    pub env: KubeEnv,
    etcd: Child,
    apiserver: Child,
    api_port: u16,
    etcd_url: String,
    ca: String,
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        for c in [&mut self.apiserver, &mut self.etcd] {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl ControlPlane {
    /// Starts a control plane with every CRD the tests use installed.
    pub fn start(name: Option<&str>) -> ControlPlane {
        let parent = std::env::temp_dir();
        sweep_stale(&parent);
        let dir = parent.join(match name {
            None => format!("foothold-kube-{}", std::process::id()),
            Some(n) => format!("foothold-kube-{}.{n}", std::process::id()),
        });
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("certs")).unwrap();

        let (etcd_port, peer_port, api_port) = (free_port(), free_port(), free_port());
        let etcd_url = format!("http://127.0.0.1:{etcd_port}");
        let peer_url = format!("http://127.0.0.1:{peer_port}");
        let etcd = spawn(
            Command::new(tool("etcd"))
                .arg("--data-dir")
                .arg(dir.join("etcd"))
                .args(["--listen-client-urls", &etcd_url])
                .args(["--advertise-client-urls", &etcd_url])
                .args(["--listen-peer-urls", &peer_url])
                .args(["--initial-advertise-peer-urls", &peer_url])
                .args(["--initial-cluster", &format!("default={peer_url}")])
                .args(["--unsafe-no-fsync", "--log-level", "warn"]),
            &dir.join("etcd.log"),
        );

        // Service-account signing key and the static tokens.
        super::run(
            Command::new(tool("openssl"))
                .args([
                    "ecparam",
                    "-genkey",
                    "-name",
                    "prime256v1",
                    "-noout",
                    "-out",
                ])
                .arg(dir.join("sa.key")),
        );
        std::fs::write(
            dir.join("tokens.csv"),
            format!("{TOKEN},admin,admin,system:masters\n{RESTRICTED_TOKEN},{RESTRICTED_USER},{RESTRICTED_USER}\n"),
        )
        .unwrap();
        let server = format!("https://127.0.0.1:{api_port}");
        let apiserver = spawn_apiserver(&dir, api_port, &etcd_url);

        // The certificate file holds the serving certificate, then the CA that signed it.
        let crt = dir.join("certs/apiserver.crt");
        let ca = wait_for(
            "kube-apiserver's certificate",
            Duration::from_secs(60),
            || {
                let pem = std::fs::read_to_string(&crt).ok()?;
                let start = pem.rfind("-----BEGIN CERTIFICATE-----")?;
                pem[start..]
                    .contains("-----END CERTIFICATE-----")
                    .then(|| pem[start..].to_owned())
            },
        );
        let kubeconfig = dir.join("kubeconfig");
        std::fs::write(
            &kubeconfig,
            serde_json::to_string_pretty(&serde_json::json!({
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "test", "cluster": {
                    "server": server,
                    "certificate-authority-data": base64(ca.as_bytes()),
                }}],
                "users": [{"name": "admin", "user": {"token": TOKEN}}],
                "contexts": [{"name": "test", "context": {"cluster": "test", "user": "admin"}}],
                "current-context": "test",
            }))
            .unwrap(),
        )
        .unwrap();
        let mut plane = ControlPlane {
            env: KubeEnv {
                kubeconfig,
                server,
                dir,
            },
            etcd,
            apiserver,
            api_port,
            etcd_url,
            ca,
        };
        plane.wait_ready();
        install_crds(&plane.env);
        plane
    }

    /// SIGKILLs kube-apiserver and starts it again on the same port, certificate and etcd; returns once it is
    /// ready.
    pub fn restart_apiserver(&mut self) {
        let _ = self.apiserver.kill();
        let _ = self.apiserver.wait();
        self.apiserver = spawn_apiserver(&self.env.dir, self.api_port, &self.etcd_url);
        self.wait_ready();
    }

    /// Kills kube-apiserver (until [`ControlPlane::start_apiserver`]).
    pub fn kill_apiserver(&mut self) {
        let _ = self.apiserver.kill();
        let _ = self.apiserver.wait();
    }

    pub fn start_apiserver(&mut self) {
        self.apiserver = spawn_apiserver(&self.env.dir, self.api_port, &self.etcd_url);
        self.wait_ready();
    }

    /// Ready when /readyz says so (etcd reached, bootstrap RBAC and CRD informers done).
    fn wait_ready(&mut self) {
        let http = ureq::Agent::new_with_config(
            ureq::config::Config::builder()
                .tls_config(
                    ureq::tls::TlsConfig::builder()
                        .root_certs(ureq::tls::RootCerts::new_with_certs(&[
                            ureq::tls::Certificate::from_pem(self.ca.as_bytes()).unwrap(),
                        ]))
                        .build(),
                )
                .http_status_as_error(false)
                .timeout_global(Some(Duration::from_secs(5)))
                .build(),
        );
        let deadline = std::time::Instant::now() + Duration::from_secs(120);
        loop {
            for c in [&mut self.etcd, &mut self.apiserver] {
                if let Ok(Some(status)) = c.try_wait() {
                    panic!(
                        "a control-plane process exited ({status}); logs in {}",
                        self.env.dir.display()
                    );
                }
            }
            let ready = http
                .get(&format!("{}/readyz", self.env.server))
                .header("Authorization", &format!("Bearer {TOKEN}"))
                .call()
                .is_ok_and(|r| r.status() == 200);
            if ready {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "kube-apiserver not ready after 120 s; logs in {}",
                self.env.dir.display()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

fn spawn_apiserver(dir: &Path, api_port: u16, etcd_url: &str) -> Child {
    let server = format!("https://127.0.0.1:{api_port}");
    spawn(
        Command::new(tool("kube-apiserver"))
            .args(["--etcd-servers", etcd_url])
            .args([
                "--advertise-address",
                "127.0.0.1",
                "--bind-address",
                "127.0.0.1",
            ])
            .args(["--secure-port", &api_port.to_string()])
            // No serving certificate given: kube-apiserver writes a self-signed one (with its CA) here.
            .arg("--cert-dir")
            .arg(dir.join("certs"))
            .args(["--service-cluster-ip-range", "10.0.0.0/24"])
            .args(["--service-account-issuer", &server])
            .arg("--service-account-key-file")
            .arg(dir.join("sa.key"))
            .arg("--service-account-signing-key-file")
            .arg(dir.join("sa.key"))
            .arg("--token-auth-file")
            .arg(dir.join("tokens.csv"))
            .args(["--authorization-mode", "RBAC"])
            .args(["--allow-privileged=true"])
            .args(["--disable-admission-plugins", "ServiceAccount"])
            .args(["--endpoint-reconciler-type", "none"]),
        &dir.join("kube-apiserver.log"),
    )
}

fn base64(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// Metal3's BareMetalHost CRD (the genuine one) and every CRD `foothold-agent crds` prints, established; then
/// the agent's RBAC.
fn install_crds(env: &KubeEnv) {
    let metal3 = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../scripts/kube-tools/crds/metal3.io_baremetalhosts.yaml");
    let mut crds: Vec<CustomResourceDefinition> =
        vec![serde_saphyr::from_str(&std::fs::read_to_string(metal3).unwrap()).unwrap()];
    crds.extend(foothold_agent::crd::shipped());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let client = env.client().await;
        let api = Api::<CustomResourceDefinition>::all(client);
        for crd in &crds {
            api.create(&PostParams::default(), crd)
                .await
                .unwrap_or_else(|e| panic!("installing CRD {:?}: {e}", crd.metadata.name));
        }
        for crd in &crds {
            established(&api, crd.metadata.name.as_deref().unwrap()).await;
        }
        install_agent_rbac(env).await;
    });
}

/// The agent's user and what RBAC lets it do, as the appliance has them (`agent/rbac/foothold-agent.yaml`).
pub const AGENT_USER: &str = "foothold:agent";

/// `agent/rbac/foothold-agent.yaml` and `agent/rbac/kubelet-serving.yaml` applied, as the appliance has them:
/// the agents these tests start act as [`AGENT_USER`] ([`KubeEnv::agent_kubeconfig`]), so a rule the
/// reconcilers need and the files lack fails a test.
async fn install_agent_rbac(env: &KubeEnv) {
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
    let client = env.client().await;
    for file in ["rbac/foothold-agent.yaml", "rbac/kubelet-serving.yaml"] {
        let text =
            std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(file)).unwrap();
        let docs: Vec<&str> = text.split("\n---\n").collect();
        assert_eq!(docs.len(), 2, "{file}: a ClusterRole, then its binding");
        let role: ClusterRole = serde_saphyr::from_str(docs[0]).unwrap();
        let binding: ClusterRoleBinding = serde_saphyr::from_str(docs[1]).unwrap();
        Api::<ClusterRole>::all(client.clone())
            .create(&PostParams::default(), &role)
            .await
            .unwrap_or_else(|e| panic!("{file}: creating the ClusterRole: {e}"));
        Api::<ClusterRoleBinding>::all(client.clone())
            .create(&PostParams::default(), &binding)
            .await
            .unwrap_or_else(|e| panic!("{file}: binding the ClusterRole: {e}"));
    }
}

/// Waits (60 s at most) until CRD `name` is established.
pub async fn established(api: &Api<CustomResourceDefinition>, name: &str) {
    let established = kube::runtime::conditions::is_crd_established();
    let wait = kube::runtime::wait::await_condition(api.clone(), name, established);
    tokio::time::timeout(Duration::from_secs(60), wait)
        .await
        .unwrap_or_else(|_| panic!("CRD {name} not established after 60 s"))
        .unwrap_or_else(|e| panic!("waiting for CRD {name}: {e}"));
}

/// How long a reconciler test waits for a condition.
pub const WAIT: Duration = Duration::from_secs(60);

/// Polls `f` every 50 ms until it returns Some, failing after `WAIT` with `what`.
pub async fn until<T, F, Fut>(what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {WAIT:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `foothold-agent serve` running `controllers` on namespace `ns` (its Lease there too, 3 s), with its data
/// under `dir/<identity>`, talking to the apiserver through `kubeconfig`, plus `extra` arguments.
pub fn controller_agent(
    dir: &Path,
    ns: &str,
    identity: &str,
    controllers: &str,
    kubeconfig: &Path,
    extra: &[&str],
) -> super::Agent {
    controller_agent_on(
        "127.0.0.1:0",
        (dir, ns, identity),
        controllers,
        kubeconfig,
        extra,
    )
}

/// [`controller_agent`] listening on `listen`.
pub fn controller_agent_on(
    listen: &str,
    (dir, ns, identity): (&Path, &str, &str),
    controllers: &str,
    kubeconfig: &Path,
    extra: &[&str],
) -> super::Agent {
    let data = dir.join(identity);
    let mut cmd = Command::new(super::agent_bin());
    cmd.args(["serve", "--listen", listen, "--data"])
        .arg(&data)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args([
            "--controllers",
            controllers,
            "--namespace",
            ns,
            "--lease-namespace",
            ns,
        ])
        .args(["--identity", identity, "--lease-duration-seconds", "3"])
        .args(extra);
    super::Agent::spawn(cmd, &data, None)
}
