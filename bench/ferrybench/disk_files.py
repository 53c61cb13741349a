"""The disk-to-disk source file, the page cache, and checking what arrived."""

import os
import shutil
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


def ensure_small_files(directory: str, count: int, dirs: int, size: int, log) -> str:
    """`count` files of `size` random bytes, flat (dirs 0) or spread over `dirs` directories.

    Made once under directory (`small-2000x4096-flat`, `small-2000x4096-20dirs`) and reused:
    built in a `.tmp` directory and renamed when complete, so an existing one is whole. Files
    0644 and directories 0755, because Globus serves anonymous sessions as `nobody`.
    """
    name = f"small-{count}x{size}-{'flat' if dirs <= 0 else f'{dirs}dirs'}"
    path = os.path.join(directory, name)
    if os.path.isdir(path) and count_files(path) == (count, count * size):
        return path
    shutil.rmtree(path, ignore_errors=True)
    tmp = path + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    log(f"small-files: writing {count} random files of {size} bytes to {path} (once; reused by later runs)")
    os.makedirs(tmp)
    os.chmod(tmp, 0o755)
    groups = [(tmp, count)] if dirs <= 0 else [
        (os.path.join(tmp, f"d{i:03d}"), count // dirs + (1 if i < count % dirs else 0)) for i in range(dirs)]
    serial = 0
    for where, n in groups:
        os.makedirs(where, exist_ok=True)
        os.chmod(where, 0o755)
        for _ in range(n):
            f_path = os.path.join(where, f"f{serial:05d}.bin")
            with open(f_path, "wb") as f:
                f.write(os.urandom(size))
            os.chmod(f_path, 0o644)
            serial += 1
    os.sync()
    os.replace(tmp, path)
    return path


def count_files(path: str) -> tuple[int, int]:
    """Regular files under path, recursively, and their total size."""
    n = total = 0
    for root, _, files in os.walk(path):
        for name in files:
            p = os.path.join(root, name)
            if os.path.isfile(p) and not os.path.islink(p):
                n += 1
                total += os.path.getsize(p)
    return n, total


def same_tree(a: str, b: str) -> tuple[bool, str]:
    """diff -r: the same names and bytes under both; the first differences when not."""
    out = subprocess.run(["diff", "-rq", a, b], capture_output=True, text=True)
    return out.returncode == 0, (out.stdout + out.stderr).strip()[:500]


def ensure_random_file(directory: str, prefix: str, size: int, log) -> str:
    """DIR/PREFIX-SIZE.bin of random bytes, made once and reused; other sizes of it are deleted."""
    path = os.path.join(directory, f"{prefix}-{size}.bin")
    if os.path.exists(path) and os.path.getsize(path) == size:
        return path
    for old in os.listdir(directory):
        if old.startswith(prefix + "-") and old.endswith(".bin"):
            os.unlink(os.path.join(directory, old))
    log(f"writing {size} random bytes to {path} (once; reused by later runs)")
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
