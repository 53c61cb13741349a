"""The disk-to-disk source file, the page cache, and checking what arrived."""

import os
import subprocess

CHUNK = 16 << 20


def ensure_source(directory: str, size: int, log) -> str:
    """A file of `size` random bytes under directory, made once and reused while its size fits.

    Random, so no layer can compress or deduplicate it; world-readable, because Globus serves
    anonymous sessions as `nobody`.
    """
    path = os.path.join(directory, f"source-{size}.bin")
    if os.path.exists(path) and os.path.getsize(path) == size:
        return path
    for old in os.listdir(directory):
        if old.startswith("source-") and old.endswith(".bin"):
            os.unlink(os.path.join(directory, old))  # one source at a time: they are large
    log(f"disk: writing {size} random bytes to {path} (once; reused by later runs)")
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        left = size
        while left:
            n = min(CHUNK, left)
            f.write(os.urandom(n))
            left -= n
        f.flush()
        os.fsync(f.fileno())
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)
    return path


def drop_caches() -> bool:
    """Writes dirty pages back and empties the page cache; False when that is not allowed."""
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def same_content(a: str, b: str) -> bool:
    """cmp -s, byte for byte."""
    return subprocess.run(["cmp", "-s", a, b]).returncode == 0


def remove(path: str) -> None:
    """Deletes a file if it is there."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
