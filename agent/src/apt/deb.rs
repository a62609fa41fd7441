//! A `.deb` package's control paragraph (deb(5)): an `ar` archive whose `control.tar` member (uncompressed,
//! gzip, xz or zstd) holds `./control`. Pure: bytes in, fields out; every failure says what is wrong.

use std::io::Read;

/// Most a control member may expand to: real ones are a few KiB.
const MAX_CONTROL_TAR: u64 = 4 << 20;

/// Most memory an xz control member's decoder may ask for, in KiB. dpkg-deb compresses with xz's preset 6
/// (an 8 MiB dictionary); a header asking for more than this is refused before anything is allocated.
const XZ_MEMORY_KIB: u32 = 64 << 10;

/// The fields of a package's control paragraph, in their order, as written (continuation lines kept).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Control {
    pub package: String,
    pub version: String,
    pub architecture: String,
    fields: Vec<(String, String)>,
}

/// Fields the repository writes itself: a package's own are dropped.
const REPOSITORY_FIELDS: [&str; 6] = ["Filename", "Size", "MD5sum", "SHA1", "SHA256", "SHA512"];

impl Control {
    /// Parses one control paragraph.
    pub fn parse(text: &str) -> Result<Control, String> {
        let mut fields: Vec<(String, String)> = Vec::new();
        let body = text.trim_end_matches(['\n', '\r']);
        for (n, line) in body.lines().enumerate() {
            let n = n + 1;
            if line.trim().is_empty() {
                return Err(format!(
                    "control line {n}: a blank line (one paragraph expected)"
                ));
            }
            if line.starts_with([' ', '\t']) {
                let Some((_, value)) = fields.last_mut() else {
                    return Err(format!(
                        "control line {n}: a continuation line before any field"
                    ));
                };
                value.push('\n');
                value.push_str(line);
                continue;
            }
            let Some((name, value)) = line.split_once(':') else {
                return Err(format!("control line {n}: no `Field: value`"));
            };
            let valid_name = !name.is_empty()
                && !name.starts_with(['#', '-'])
                && name.bytes().all(|b| b.is_ascii_graphic() && b != b':');
            if !valid_name {
                return Err(format!("control line {n}: {name:?} is not a field name"));
            }
            if fields.iter().any(|(f, _)| f.eq_ignore_ascii_case(name)) {
                return Err(format!("control line {n}: field {name} appears twice"));
            }
            fields.push((name.to_owned(), value.trim().to_owned()));
        }
        let get = |want: &str| {
            fields
                .iter()
                .find(|(f, _)| f.eq_ignore_ascii_case(want))
                .map(|(_, v)| v.clone())
                .filter(|v| !v.is_empty())
                .ok_or_else(|| format!("control has no {want} field"))
        };
        let (package, version, architecture) =
            (get("Package")?, get("Version")?, get("Architecture")?);
        let package_ok = package.len() >= 2
            && package.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
            && package
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "+-.".contains(c));
        if !package_ok {
            return Err(format!("Package {package:?} is not a Debian package name"));
        }
        // Debian policy §5.6.12: [epoch:]upstream[-revision], of alphanumerics and . + ~ - (and : after an epoch).
        let version_ok = version.starts_with(|c: char| c.is_ascii_digit())
            && version
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || ".+~-:".contains(c));
        if !version_ok {
            return Err(format!("Version {version:?} is not a Debian version"));
        }
        let arch_ok = !architecture.is_empty()
            && architecture
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
        if !arch_ok {
            return Err(format!(
                "Architecture {architecture:?} is not an architecture"
            ));
        }
        fields.retain(|(f, _)| !REPOSITORY_FIELDS.iter().any(|r| f.eq_ignore_ascii_case(r)));
        Ok(Control {
            package,
            version,
            architecture,
            fields,
        })
    }

    /// The file name Debian's archive gives the package: `<package>_<version without epoch>_<arch>.deb`.
    pub fn file_name(&self) -> String {
        let version = self
            .version
            .split_once(':')
            .map_or(self.version.as_str(), |(_, v)| v);
        format!("{}_{version}_{}.deb", self.package, self.architecture)
    }

    /// The paragraph as written, each field on its line(s), ending in a newline.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for (name, value) in &self.fields {
            out.push_str(name);
            out.push(':');
            if !value.is_empty() && !value.starts_with('\n') {
                out.push(' ');
            }
            out.push_str(value);
            out.push('\n');
        }
        out
    }
}

/// Reads the control paragraph of the `.deb` in `reader`.
pub fn read_control(mut reader: impl Read) -> Result<Control, String> {
    // ar(5), read here rather than by a crate: the `ar` crate 0.9 panics on some malformed headers (found by
    // fuzzing `deb`), and the format is a signature and 60-byte member headers.
    let mut magic = [0u8; 8];
    let got = read_full(&mut reader, &mut magic).map_err(|e| format!("not a .deb: {e}"))?;
    if got < 8 || &magic != b"!<arch>\n" {
        return Err("not a .deb: no ar archive signature".into());
    }
    let mut first = true;
    loop {
        let mut header = [0u8; 60];
        match read_full(&mut reader, &mut header).map_err(|e| format!("not a .deb: {e}"))? {
            0 => break,
            60 if &header[58..60] == b"`\n" => {}
            _ => return Err("not a .deb (ar archive): a malformed member header".into()),
        }
        let name = String::from_utf8_lossy(&header[..16])
            .trim_end()
            .trim_end_matches('/')
            .to_owned();
        let size: u64 = std::str::from_utf8(&header[48..58])
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .ok_or_else(|| format!("not a .deb (ar archive): member {name:?} has no size"))?;
        let mut entry = (&mut reader).take(size);
        if first {
            if name != "debian-binary" {
                return Err(format!(
                    "not a .deb: the first member is {name:?}, not debian-binary"
                ));
            }
            let mut version = String::new();
            (&mut entry)
                .take(16)
                .read_to_string(&mut version)
                .map_err(|e| format!("debian-binary: {e}"))?;
            if !version.starts_with("2.") {
                return Err(format!(
                    "debian-binary says {:?}; format 2.x is read",
                    version.trim()
                ));
            }
            first = false;
            skip_member(entry)?;
            pad(&mut reader, size)?;
            continue;
        }
        let Some(compression) = name.strip_prefix("control.tar") else {
            skip_member(entry)?;
            pad(&mut reader, size)?;
            continue;
        };
        let mut tar = Vec::new();
        let mut limited = (&mut entry).take(MAX_CONTROL_TAR);
        let read = match compression {
            "" => limited.read_to_end(&mut tar),
            ".gz" => flate2::read::GzDecoder::new(limited)
                .take(MAX_CONTROL_TAR)
                .read_to_end(&mut tar),
            ".xz" => lzma_rust2::XzReader::new_mem_limit(limited, true, XZ_MEMORY_KIB)
                .take(MAX_CONTROL_TAR)
                .read_to_end(&mut tar),
            ".zst" => ruzstd::decoding::StreamingDecoder::new(limited)
                .map_err(|e| std::io::Error::other(e.to_string()))
                .and_then(|d| d.take(MAX_CONTROL_TAR).read_to_end(&mut tar)),
            other => return Err(format!("{name}: compression {other:?} is not read")),
        };
        read.map_err(|e| format!("{name}: {e}"))?;
        return control_from_tar(&tar).map_err(|e| format!("{name}: {e}"));
    }
    Err(if first {
        "not a .deb: an empty archive".into()
    } else {
        "not a .deb: no control.tar member".into()
    })
}

/// Reads until `buf` is full or the input ends; returns how much was read.
fn read_full(reader: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match reader.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

/// Reads past the rest of a member.
fn skip_member(mut rest: impl Read) -> Result<(), String> {
    std::io::copy(&mut rest, &mut std::io::sink()).map_err(|e| format!("not a .deb: {e}"))?;
    Ok(())
}

/// Reads past the padding byte after a member of odd `size` (members start at even offsets).
fn pad(reader: &mut impl Read, size: u64) -> Result<(), String> {
    if size % 2 == 1 {
        read_full(reader, &mut [0u8; 1]).map_err(|e| format!("not a .deb: {e}"))?;
    }
    Ok(())
}

fn control_from_tar(tar: &[u8]) -> Result<Control, String> {
    let mut archive = tar::Archive::new(tar);
    for entry in archive.entries().map_err(|e| e.to_string())? {
        let mut entry = entry.map_err(|e| e.to_string())?;
        let path = entry.path().map_err(|e| e.to_string())?;
        if path.as_os_str() == "./control" || path.as_os_str() == "control" {
            let mut text = String::new();
            entry
                .read_to_string(&mut text)
                .map_err(|e| format!("./control: {e}"))?;
            return Control::parse(&text);
        }
    }
    Err("no ./control in it".into())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    const CONTROL: &str = "Package: hello-foothold\nVersion: 1:2.0-1\nArchitecture: all\nMaintainer: Foothold <dev@foothold.invalid>\nSize: 99\nDescription: a test\n a longer text\n .\n more\n";

    /// A .deb of `control` with its control member compressed by `compression` (as dpkg-deb lays it out).
    pub(crate) fn deb(control: &str, compression: &str) -> Vec<u8> {
        let mut tar = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_gnu();
        h.set_size(control.len() as u64);
        h.set_mode(0o644);
        h.set_cksum();
        tar.append_data(&mut h, "./control", control.as_bytes())
            .unwrap();
        let tar = tar.into_inner().unwrap();
        let member = match compression {
            "" => tar,
            ".gz" => {
                let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
                std::io::Write::write_all(&mut e, &tar).unwrap();
                e.finish().unwrap()
            }
            ".xz" => {
                let options = lzma_rust2::XzOptions::with_preset(6);
                let mut w = lzma_rust2::XzWriter::new(Vec::new(), options).unwrap();
                std::io::Write::write_all(&mut w, &tar).unwrap();
                w.finish().unwrap()
            }
            _ => unreachable!(),
        };
        let mut ar = ar::Builder::new(Vec::new());
        for (name, data) in [
            ("debian-binary".to_string(), b"2.0\n".to_vec()),
            (format!("control.tar{compression}"), member),
            ("data.tar".to_string(), Vec::new()),
        ] {
            let header = ar::Header::new(name.into_bytes(), data.len() as u64);
            ar.append(&header, &data[..]).unwrap();
        }
        ar.into_inner().unwrap()
    }

    #[test]
    fn reads_the_control_of_each_compression() {
        for compression in ["", ".gz", ".xz"] {
            let c = read_control(&deb(CONTROL, compression)[..]).unwrap();
            assert_eq!(
                (
                    c.package.as_str(),
                    c.version.as_str(),
                    c.architecture.as_str()
                ),
                ("hello-foothold", "1:2.0-1", "all")
            );
            assert_eq!(c.file_name(), "hello-foothold_2.0-1_all.deb");
            // The package's own Size is dropped (the repository writes it); continuation lines are kept.
            assert_eq!(
                c.render(),
                "Package: hello-foothold\nVersion: 1:2.0-1\nArchitecture: all\nMaintainer: Foothold <dev@foothold.invalid>\nDescription: a test\n a longer text\n .\n more\n"
            );
        }
    }

    #[test]
    fn refusals_say_what_is_wrong() {
        let err = |bytes: &[u8]| read_control(bytes).unwrap_err();
        assert!(err(b"not an archive").contains("not a .deb"));
        assert!(err(b"!<arch>\n").contains("empty"));
        let no_version = CONTROL.replace("Version: 1:2.0-1\n", "");
        assert!(err(&deb(&no_version, ".gz")).contains("no Version"));
        let bad_name = CONTROL.replace("hello-foothold", "Hello_Foothold");
        assert!(err(&deb(&bad_name, "")).contains("not a Debian package name"));
        let twice = format!("{CONTROL}Package: again\n");
        assert!(err(&deb(&twice, "")).contains("twice"));
        let two = format!("{CONTROL}\nPackage: second\n");
        assert!(err(&deb(&two, "")).contains("blank line"));
        assert!(Control::parse(" leading\n")
            .unwrap_err()
            .contains("continuation"));
    }

    #[test]
    fn reads_what_dpkg_deb_builds() {
        let Ok(out) = std::process::Command::new("dpkg-deb")
            .arg("--version")
            .output()
        else {
            panic!("dpkg-deb is needed (Debian's dpkg)");
        };
        assert!(out.status.success());
        let dir = tempfile::tempdir().unwrap();
        let pkg = dir.path().join("pkg");
        std::fs::create_dir_all(pkg.join("DEBIAN")).unwrap();
        std::fs::write(
            pkg.join("DEBIAN/control"),
            CONTROL.replace("Size: 99\n", ""),
        )
        .unwrap();
        // dpkg-deb compresses the control member like the data member: each compressor it offers.
        for z in ["-Zxz", "-Zgzip", "-Zzstd", "-Znone"] {
            let deb = dir.path().join(format!("x{z}.deb"));
            let status = std::process::Command::new("dpkg-deb")
                .args(["--root-owner-group", z, "--build"])
                .arg(&pkg)
                .arg(&deb)
                .stdout(std::process::Stdio::null())
                .status()
                .unwrap();
            assert!(status.success(), "dpkg-deb {z}");
            let c = read_control(std::fs::File::open(&deb).unwrap()).unwrap();
            assert_eq!(c.package, "hello-foothold", "{z}");
        }
    }
}
