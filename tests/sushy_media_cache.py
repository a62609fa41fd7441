"""sushy-tools' `sushy-emulator`, the tests' Redfish BMC, with one change to its virtual media: an image fetched
for InsertMedia is kept, by URL, for the next InsertMedia of that URL, and an InsertMedia of a URL still being
fetched waits for that fetch instead of starting another.

Why: sushy-tools fetches the whole image inside the InsertMedia request (a real BMC streams it as the host reads
it), and Ironic's Redfish client (sushy) gives a request 60 s. In the tests the appliance runs under TCG, where
its agent serves the node's live ISO (about 360 MiB, over TLS) at 2 to 8 MB/s depending on the host: the first
InsertMedia can outlast Ironic's wait. Unchanged, every retry then fetches the image again beside the fetches
still running and none ends in time; with this, the first fetch completes and a retry takes its image at once.
Every fetch still goes to the URL the BareMetalHost names; the image is kept only while the server reports the
same length, ETag and Last-Modified for it (a HEAD), so a changed image is fetched again.

Run with the venv's python in place of `sushy-emulator`; the arguments are the same."""

import os
import sys
import tempfile
import threading

import requests
from sushy_tools.emulator import main as emulator
from sushy_tools.emulator.resources import vmedia
from sushy_tools.emulator.resources.systems import libvirtdriver

_fetch = vmedia.BaseDriver._get_image
_lock = threading.Lock()
_fetches = {}


def _validator(image_url, auth, verify_media_cert, custom_cert):
    """What identifies the image's content now, or None if the server does not say (or cannot be trusted).
    The server is checked as sushy-tools' own fetch checks it: with the BMC's custom CA when it has one."""
    try:
        with tempfile.NamedTemporaryFile(mode="wt") as ca:
            verify = verify_media_cert
            if custom_cert is not None:
                ca.write(custom_cert)
                ca.flush()
                verify = ca.name
            r = requests.head(image_url, auth=auth, verify=verify, timeout=30, allow_redirects=True)
    except requests.RequestException:
        return None
    if r.status_code != 200:
        return None
    return tuple(r.headers.get(h, "") for h in ("Content-Length", "ETag", "Last-Modified"))


def _get_image(self, image_url, auth, verify_media_cert, custom_cert):
    validator = _validator(image_url, auth, verify_media_cert, custom_cert)
    if validator is None:
        return _fetch(self, image_url, auth, verify_media_cert, custom_cert)
    key = (image_url, validator)
    with _lock:
        entry = _fetches.get(key)
        owner = entry is None
        if owner:
            entry = _fetches[key] = {"done": threading.Event()}
    if owner:
        try:
            name, path = _fetch(self, image_url, auth, verify_media_cert, custom_cert)
            # Eject unlinks the path it was given: the kept copy is another link to the same file.
            kept = path + ".kept"
            os.link(path, kept)
            entry["image"] = (name, kept)
            self._logger.info("kept %s for the next InsertMedia of it", image_url)
            return name, path
        except BaseException as e:
            entry["error"] = e
            with _lock:
                _fetches.pop(key, None)
            raise
        finally:
            entry["done"].set()
    entry["done"].wait()
    if "error" in entry:
        raise entry["error"]
    name, kept = entry["image"]
    path = os.path.join(tempfile.mkdtemp(dir=os.path.dirname(os.path.dirname(kept))), name)
    os.link(kept, path)
    self._logger.info("InsertMedia of %s took the image kept from an earlier fetch", image_url)
    return name, path


# A request that outlasted Ironic's wait still ends by setting its image on the domain, possibly beside the
# retry's: one domain change at a time.
_set_boot_image = libvirtdriver.LibvirtDriver.set_boot_image
_domain_lock = threading.Lock()


def _set_boot_image_serialised(self, *args, **kwargs):
    with _domain_lock:
        return _set_boot_image(self, *args, **kwargs)


vmedia.BaseDriver._get_image = _get_image
libvirtdriver.LibvirtDriver.set_boot_image = _set_boot_image_serialised

if __name__ == "__main__":
    sys.argv[0] = "sushy-emulator"
    sys.exit(emulator.main())
