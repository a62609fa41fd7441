//! The data partition's tree: the agent's store, filled by the agent binary itself (`add-file`, `import`) with
//! the served file inputs, the spec's image layouts, the pulled container images and the images made here
//! (pause, CoreDNS), so the store's format is the agent's own.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, Result};
use serde_json::json;
use sha2::{Digest, Sha256};

use super::context::{Build, Record};
use super::inputs::FileInput;
use crate::cmd::CommandExt as _;
use crate::files::clamp_mtimes;
use crate::spec::Serve;

/// Fills `<work>/data` with the store; returns it. `agent`: the binary that fills it, and the same without debug
/// information (the installer image's); `base`: Debian's tree the root file system was made from.
pub fn stage(
    b: &Build,
    files: &[FileInput],
    (agent, stripped): (&Path, &Path),
    base: &Path,
    record: &mut Record,
) -> Result<PathBuf> {
    let Build {
        loaded,
        settings,
        progress,
        work,
        ..
    } = b;
    let spec = &loaded.spec;
    let epoch = settings.source_date_epoch;
    let data = work.join("data");
    fs::create_dir_all(&data)?;
    // Every repository imported here is one the appliance ships: only an admin credential may write it.
    let protected = std::cell::RefCell::new(std::collections::BTreeSet::new());
    let import = |layout: &Path, extra: &[&str]| {
        let out = Command::new(agent)
            .arg("import")
            .arg(layout)
            .args(extra)
            .arg("--data")
            .arg(&data)
            .run()?;
        protected.borrow_mut().extend(imported_repositories(&out));
        anyhow::Ok(out)
    };
    let add_file = |src: &Path, sv: &Serve, sha256: &str| {
        Command::new(agent)
            .env("SOURCE_DATE_EPOCH", epoch.to_string())
            .arg("add-file")
            .arg(src)
            .arg("--data")
            .arg(&data)
            .args(["--owner", &sv.owner, "--cluster", &sv.cluster])
            .args(["--kind", sv.kind.as_str(), "--name", &sv.name])
            .args(["--sha256", sha256])
            .run()
    };
    for f in files {
        if let Some(sv) = &f.component.serve {
            add_file(&f.src, sv, &f.sha256)
                .with_context(|| format!("{}: adding it to the agent's store", f.field))?;
        }
        record.inputs.insert(
            f.field.trim_start_matches("components.").to_owned(),
            json!({"from": f.origin, "sha256": f.sha256, "dest": f.component.dest, "serve": f.component.serve}),
        );
    }
    progress.step(
        "data",
        &format!(
            "{} image layouts into the agent's store",
            spec.components.image_layouts.len()
        ),
    );
    for (i, l) in spec.components.image_layouts.iter().enumerate() {
        let layout = loaded.resolve(&l.path);
        import(&layout, &[]).with_context(|| {
            format!(
                "components.imageLayouts[{i}]: importing {}",
                layout.display()
            )
        })?;
        let index = fs::read(layout.join("index.json"))
            .with_context(|| format!("components.imageLayouts[{i}]"))?;
        record.inputs.insert(
            format!("layout:{}", l.path.display()),
            json!({"indexSha256": hex::encode(Sha256::digest(&index))}),
        );
    }
    if !spec.components.images.is_empty() {
        progress.step(
            "data",
            &format!(
                "{} container images into the agent's store",
                spec.components.images.len()
            ),
        );
        let layout = work.join("images");
        let records = crate::images::write_layout(loaded, &settings.cache, &layout)?;
        import(&layout, &["--present-platforms"])
            .context("components.images: importing into the agent's store")?;
        for (i, r) in records.into_iter().enumerate() {
            record.inputs.insert(format!("images[{i}]"), r);
        }
    }
    if let Some(k) = &spec.components.kubernetes {
        progress.step(
            "data",
            "the cluster's images (pause, CoreDNS, the control plane's, etcd), made from their binaries",
        );
        let (layout, records) = super::workload::images(k, files, &settings.cache, epoch)?;
        import(&layout, &[])
            .context("components.kubernetes: importing the images made from its binaries")?;
        for (name, r) in &records {
            record
                .inputs
                .insert(format!("kubernetes.{name}.image"), r.clone());
        }
        // The release file the BPA's installer reads, naming the node binaries at the provisioning address.
        if let (true, Some(p)) = (
            super::configure::installs_workload_clusters(spec),
            &spec.network.provisioning,
        ) {
            let scheme = if spec.components.agent_tls {
                "https"
            } else {
                "http"
            };
            let ip = p.address.split('/').next().unwrap_or_default();
            let text =
                super::workload::release(k, files, &format!("{scheme}://{ip}:5000"), &records)?;
            let file = work.join(super::workload::RELEASE_FILE);
            fs::write(&file, &text)?;
            let served = k.served(super::workload::RELEASE_FILE);
            let sha256 = hex::encode(Sha256::digest(text.as_bytes()));
            add_file(&file, &served, &sha256).context(
                "components.kubernetes: adding kubernetes-release.json to the agent's store",
            )?;
            record.inputs.insert(
                "kubernetes.release".into(),
                json!({"served": served.path(), "sha256": sha256}),
            );
            // The BPA's installer image, with that release file in it.
            progress.step(
                "data",
                "the installer image: the agent, its libraries from the root file system, the release file",
            );
            let (layout, r) =
                super::installer::image(stripped, base, &file, &settings.cache, epoch)?;
            import(&layout, &[]).context("the installer image: importing it")?;
            record.inputs.insert("installer.image".into(), r);
        }
    }
    let mut list = String::from(
        "# The repositories this appliance was built with: only an admin credential writes them\n\
         # (foothold-agent serve --protected-repositories).\n",
    );
    for repo in protected.into_inner() {
        list.push_str(&repo);
        list.push('\n');
    }
    fs::write(data.join(PROTECTED_FILE), list)?;
    clamp_mtimes(&data, epoch)?;
    Ok(data)
}

/// In the data partition: the repositories [`stage`] imported.
pub const PROTECTED_FILE: &str = "protected-repositories";

/// The repositories `foothold-agent import` reports (`repo[:tag] digest` a line).
fn imported_repositories(out: &str) -> impl Iterator<Item = String> + '_ {
    out.lines().filter_map(|l| {
        let reference = l.split_whitespace().next()?;
        let slash = reference.rfind('/').map_or(0, |i| i + 1);
        let repo = match reference[slash..].find(':') {
            Some(colon) => &reference[..slash + colon],
            None => reference,
        };
        Some(repo.to_owned())
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn imported_repositories_are_the_references_without_their_tags() {
        let out = "registry.k8s.io/pause:3.10 sha256:aa\nfoothold.local/foothold/installer:appliance sha256:bb\n\
                   localhost:5000/team/app sha256:cc\nlocalhost:5000/x:v1 sha256:dd\n";
        assert_eq!(
            super::imported_repositories(out).collect::<Vec<_>>(),
            [
                "registry.k8s.io/pause",
                "foothold.local/foothold/installer",
                "localhost:5000/team/app",
                "localhost:5000/x"
            ]
        );
    }
}
