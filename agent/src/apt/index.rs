//! The repository's index files (Debian's repository format): a `Packages` file per architecture and the
//! `Release` that names them by size and SHA256. Pure: the packages in, the texts out, the same texts for the
//! same packages in any order.

use std::collections::BTreeSet;

use super::deb::Control;

/// The suite (and codename) and the one component the repository has.
pub const SUITE: &str = "foothold";
pub const COMPONENT: &str = "main";

/// Architectures listed even with no package of theirs, so that apt on them finds an (empty) index.
const ALWAYS: [&str; 1] = ["amd64"];

/// A `.deb` in the repository: its control paragraph and where `pool/` serves it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Package {
    pub control: Control,
    /// Relative to the repository's root (`pool/<sha256>/<file name>`).
    pub filename: String,
    pub size: u64,
    pub sha256: String,
}

/// The pool path of a `.deb` with content `sha256` and file name `name` (`Control::file_name`).
pub fn pool_path(sha256: &str, name: &str) -> String {
    format!("pool/{sha256}/{name}")
}

/// Architectures the repository indexes: [`ALWAYS`] and every package's but `all`, sorted.
pub fn architectures(packages: &[Package]) -> Vec<String> {
    let mut set: BTreeSet<String> = ALWAYS.iter().map(|a| a.to_string()).collect();
    set.extend(
        packages
            .iter()
            .map(|p| p.control.architecture.clone())
            .filter(|a| a != "all"),
    );
    set.into_iter().collect()
}

/// The `Packages` file of `arch`: its packages and the `all` ones, one paragraph each, ordered by name,
/// version and file.
pub fn packages_file(packages: &[Package], arch: &str) -> String {
    let mut chosen: Vec<&Package> = packages
        .iter()
        .filter(|p| p.control.architecture == arch || p.control.architecture == "all")
        .collect();
    chosen.sort_by(|a, b| {
        (&a.control.package, &a.control.version, &a.filename).cmp(&(
            &b.control.package,
            &b.control.version,
            &b.filename,
        ))
    });
    chosen.dedup_by(|a, b| a.filename == b.filename);
    let mut out = String::new();
    for (i, p) in chosen.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        out.push_str(&p.control.render());
        out.push_str(&format!(
            "Filename: {}\nSize: {}\nSHA256: {}\n",
            p.filename, p.size, p.sha256
        ));
    }
    out
}

/// The path of `arch`'s `Packages` under `dists/<suite>/`.
pub fn packages_path(arch: &str) -> String {
    format!("{COMPONENT}/binary-{arch}/Packages")
}

/// An index file the `Release` names: its path under `dists/<suite>/`, size and SHA256.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Indexed {
    pub path: String,
    pub size: u64,
    pub sha256: String,
}

/// The `Release` of the suite. `date` is an RFC 2822 date (apt refuses a Release dated in its future).
pub fn release(files: &[Indexed], architectures: &[String], date: &str) -> String {
    let mut out = format!(
        "Origin: Foothold\nLabel: Foothold\nSuite: {SUITE}\nCodename: {SUITE}\nDate: {date}\n\
         Architectures: {}\nComponents: {COMPONENT}\nAcquire-By-Hash: yes\n\
         Description: packages uploaded to this site's Foothold appliance\nSHA256:\n",
        architectures.join(" ")
    );
    for f in files {
        out.push_str(&format!(" {} {} {}\n", f.sha256, f.size, f.path));
    }
    out
}

/// The files a `Release` names (its `SHA256:` lines).
pub fn release_files(release: &str) -> Vec<Indexed> {
    let mut out = Vec::new();
    let mut in_sha256 = false;
    for line in release.lines() {
        if !line.starts_with(' ') {
            in_sha256 = line.trim_end() == "SHA256:";
            continue;
        }
        if !in_sha256 {
            continue;
        }
        let parts: Vec<&str> = line.split_whitespace().collect();
        if let [sha256, size, path] = parts[..] {
            if let Ok(size) = size.parse() {
                out.push(Indexed {
                    path: path.to_owned(),
                    size,
                    sha256: sha256.to_owned(),
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn package(name: &str, version: &str, arch: &str) -> Package {
        let control = Control::parse(&format!(
            "Package: {name}\nVersion: {version}\nArchitecture: {arch}\nDescription: x\n"
        ))
        .unwrap();
        let sha256 = format!("{:064x}", name.len() * 1000 + version.len());
        Package {
            control,
            filename: pool_path(&sha256, &format!("{name}_{version}_{arch}.deb")),
            size: 10,
            sha256,
        }
    }

    #[test]
    fn packages_of_an_architecture_include_the_all_ones() {
        let ps = vec![
            package("zeta", "1", "amd64"),
            package("alpha", "2", "all"),
            package("alpha", "10", "all"),
            package("beta", "1", "arm64"),
        ];
        assert_eq!(architectures(&ps), ["amd64", "arm64"]);
        let amd64 = packages_file(&ps, "amd64");
        let names: Vec<&str> = amd64
            .lines()
            .filter_map(|l| l.strip_prefix("Package: "))
            .collect();
        assert_eq!(names, ["alpha", "alpha", "zeta"]);
        assert!(amd64.contains("Filename: pool/") && amd64.contains("\n\nPackage: "));
        assert!(!amd64.contains("beta"));
        assert!(packages_file(&[], "amd64").is_empty());
    }

    #[test]
    fn release_names_its_files_and_reads_back() {
        let files = vec![Indexed {
            path: packages_path("amd64"),
            size: 42,
            sha256: "ab".repeat(32),
        }];
        let r = release(&files, &["amd64".into()], "Tue, 24 Nov 2026 14:00:00 GMT");
        assert!(r.contains("Acquire-By-Hash: yes\n"), "{r}");
        assert!(r.ends_with(&format!(
            " {} 42 main/binary-amd64/Packages\n",
            "ab".repeat(32)
        )));
        assert_eq!(release_files(&r), files);
    }

    proptest! {
        /// The same packages in any order give the same Packages file.
        #[test]
        fn order_does_not_matter(seed in any::<u64>()) {
            let mut ps: Vec<Package> = (0..6)
                .map(|i| package(&format!("p{}", i % 3), &format!("{}", i), if i % 2 == 0 { "all" } else { "amd64" }))
                .collect();
            let before = packages_file(&ps, "amd64");
            let mut x = seed | 1;
            for i in (1..ps.len()).rev() {
                x ^= x << 13; x ^= x >> 7; x ^= x << 17;
                ps.swap(i, (x % (i as u64 + 1)) as usize);
            }
            prop_assert_eq!(packages_file(&ps, "amd64"), before);
        }
    }
}
