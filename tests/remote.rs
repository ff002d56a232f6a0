//! `brevis-mount s3://…` mounted for real against an S3-compatible server on
//! loopback (moto, from the tests' venv: BREVIS_PYTHON, made by
//! scripts/test/pyenv.sh): presented files equal their originals, bases resolve in
//! the store, reads fetch only the records they touch, network faults give
//! EIO in bounded time and never wrong bytes, and a replaced object never
//! mixes with cached bytes.

mod common;
#[path = "common/fuse.rs"]
mod fuse;

use common::*;
use fuse::*;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const BUCKET: &str = "models";

/// A moto S3 server on a free loopback port, stopped when dropped.
struct Moto {
    child: Child,
    port: u16,
}

fn moto() -> Moto {
    let python = std::env::var("BREVIS_PYTHON")
        .expect("BREVIS_PYTHON: the venv of scripts/test/pyenv.sh, with moto[server] and boto3");
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new(python)
        .args([
            "-m",
            "moto.server",
            "-H",
            "127.0.0.1",
            "-p",
            &port.to_string(),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut moto = Moto { child, port };
    let start = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if let Some(status) = moto.child.try_wait().unwrap() {
            panic!("moto exited with {status}");
        }
        assert!(start.elapsed() < Duration::from_secs(30), "moto not up");
        std::thread::sleep(Duration::from_millis(50));
    }
    moto
}

impl Moto {
    /// Runs `code` with `s3`, a boto3 client of this server, and `args`.
    fn python(&self, code: &str, args: &[&str]) {
        let preamble = format!(
            "import boto3, sys\n\
             s3 = boto3.client('s3', endpoint_url='http://127.0.0.1:{}', \
             aws_access_key_id='test', aws_secret_access_key='test', region_name='us-east-1')\n\
             args = sys.argv[1:]\n",
            self.port
        );
        let out = Command::new(std::env::var("BREVIS_PYTHON").unwrap())
            .arg("-c")
            .arg(preamble + code)
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Uploads every file under `dir` to the bucket under `prefix`, readable
    /// by anyone (as over plain HTTP).
    fn upload(&self, dir: &Path, prefix: &str) {
        let mut args = vec![BUCKET.to_string()];
        for rel in files(dir) {
            args.push(dir.join(&rel).to_str().unwrap().to_string());
            args.push(format!("{prefix}/{}", rel.to_str().unwrap()));
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        self.python(
            "try:\n    s3.create_bucket(Bucket=args[0])\nexcept Exception:\n    pass\n\
             for local, key in zip(args[1::2], args[2::2]):\n    \
             s3.upload_file(local, args[0], key, ExtraArgs={'ACL': 'public-read'})\n",
            &args,
        );
    }

    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        self.stop();
    }
}

/// `brevis-mount -f URL` with the store at `port` (moto, or a proxy to it).
fn mount_store(url: &str, port: u16, options: &[&str]) -> Mounted {
    let mut server = Command::new(env!("CARGO_BIN_EXE_brevis-mount"));
    server
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("AWS_REGION", "us-east-1")
        .env("AWS_ENDPOINT_URL", format!("http://127.0.0.1:{port}"));
    mount_with(server, Path::new(url), options)
}

fn fetched(m: &Mounted) -> u64 {
    stats(m)["fetched_bytes"].as_u64().unwrap()
}

/// One generated checkpoint of about 4.5 MB (72 chunks of the test size)
/// and its archive, in a folder of its own.
struct Big {
    dir: tempfile::TempDir,
    original: Vec<u8>,
    archive: PathBuf,
}

fn big(seed: u64) -> Big {
    packed(checkpoint(seed, 48))
}

/// `original` written to a temporary folder and packed into `archives/m.brv` there.
fn packed(original: Vec<u8>) -> Big {
    let dir = tempfile::tempdir().unwrap();
    let src = write_temp(dir.path(), "src.safetensors", &original);
    let archives = dir.path().join("archives");
    std::fs::create_dir(&archives).unwrap();
    let archive = archives.join("m.brv");
    pack(&src, &archive);
    Big {
        dir,
        original,
        archive,
    }
}

fn is_eio(result: &std::io::Result<Vec<u8>>) -> bool {
    matches!(result, Err(e) if e.raw_os_error() == Some(libc::EIO))
}

#[test]
fn a_store_prefix_reads_as_the_originals_with_bases_in_the_same_store() {
    let model = model();
    // A fine-tune stored against the model's archive, one folder down: its
    // index names the base as ../model.brv.
    let mut tuned = std::fs::read(model.originals.join("model.safetensors")).unwrap();
    let n = tuned.len();
    tuned[n - 3000..].iter_mut().for_each(|b| *b ^= 1);
    std::fs::create_dir(model.originals.join("tuned")).unwrap();
    let tuned_src = model.originals.join("tuned/model.safetensors");
    std::fs::write(&tuned_src, &tuned).unwrap();
    std::fs::create_dir(model.archives.join("tuned")).unwrap();
    let tuned_brv = model.archives.join("tuned/model.brv");
    let base = model.archives.join("model.brv");
    brevis(&[
        "pack",
        "-q",
        "--base",
        s(&base),
        s(&tuned_src),
        s(&tuned_brv),
    ]);

    let server = moto();
    server.upload(&model.archives, "runs/1");
    let m = mount_store(&format!("s3://{BUCKET}/runs/1"), server.port, &[]);
    assert_eq!(files(&m.point), files(&model.originals));
    for rel in files(&model.originals) {
        let shown = std::fs::read(m.point.join(&rel)).unwrap();
        let original = std::fs::read(model.originals.join(&rel)).unwrap();
        assert!(shown == original, "{} differs", rel.display());
    }
    // One archive alone, its base found in the store.
    let url = format!("s3://{BUCKET}/runs/1/tuned/model.brv");
    let single = mount_store(&url, server.port, &[]);
    assert_eq!(files(&single.point), [PathBuf::from("model.safetensors")]);
    assert!(std::fs::read(single.path("model.safetensors")).unwrap() == tuned);
    // The same over plain HTTP range requests (moto answers them too).
    let url = format!(
        "http://127.0.0.1:{}/{BUCKET}/runs/1/tuned/model.brv",
        server.port
    );
    let web = mount_store(&url, server.port, &[]);
    assert_eq!(files(&web.point), [PathBuf::from("model.safetensors")]);
    assert!(std::fs::read(web.path("model.safetensors")).unwrap() == tuned);
    assert!(web.log_text().is_empty(), "{}", web.log_text());
    assert!(m.log_text().is_empty(), "{}", m.log_text());
    assert!(single.log_text().is_empty(), "{}", single.log_text());
}

#[test]
fn reads_fetch_only_the_records_they_touch() {
    let big = big(5);
    let archive = brevis::Archive::open(&big.archive).unwrap();
    let n = archive.chunks().len();
    let index_bytes = archive.archive_len() - archive.record_offset(n);
    let block = brevis::remote::BLOCK;
    let server = moto();
    server.upload(big.archive.parent().unwrap(), "one");
    let url = format!("s3://{BUCKET}/one");

    // Opening reads the trailer and index (and the first block, holding
    // the head): nothing else. Read-ahead is off: this file is shorter than
    // the distance within which a handle's first read counts as sequential
    // from 0, and the records decoded ahead, fetched on another thread,
    // would be counted or not as the threads ran (the sequential read
    // below has it on).
    let m = mount_store(&url, server.port, &["--read-ahead", "0"]);
    let file = open_direct(&m.path("m.safetensors"));
    let opened = fetched(&m);
    assert!(
        opened >= index_bytes && opened <= index_bytes + 3 * block,
        "opening fetched {opened} bytes for an index of {index_bytes}"
    );
    // A small read far into the file: its record, give or take a block on
    // each side.
    let i = n * 2 / 3;
    let at = archive.chunk_range(i).start + 100;
    let got = read_range(&file, at, 4096).unwrap();
    assert!(got == big.original[at as usize..at as usize + 4096]);
    let record = archive.chunks()[i].rec_len;
    let read = fetched(&m) - opened;
    eprintln!(
        "random 4 KiB read: {read} bytes fetched for a record of {record}; \
         opening: {opened} for an index of {index_bytes}"
    );
    assert!(
        read >= record && read <= record + 2 * block,
        "{read} bytes fetched for a record of {record}"
    );

    // A whole sequential read of another mount fetches each byte once, in
    // few requests.
    let seq = mount_store(&url, server.port, &[]);
    let whole = std::fs::read(seq.path("m.safetensors")).unwrap();
    assert!(whole == big.original);
    let all = stats(&seq);
    let (bytes, requests) = (
        all["fetched_bytes"].as_u64().unwrap(),
        all["requests"].as_u64().unwrap(),
    );
    eprintln!(
        "sequential: {bytes} bytes in {requests} requests for an archive of {} ({n} chunks)",
        archive.archive_len()
    );
    assert!(bytes >= archive.archive_len() && bytes <= archive.archive_len() + block);
    assert!(
        requests < n as u64 / 3,
        "{requests} requests for {n} records"
    );
}

/// A checkpoint of BF16 weights whose archive (about 16 MB) is eight times
/// the fetch cache of `SMALL_CACHES`, and the archive, in a folder of its own.
fn weights() -> Big {
    let tensors: Vec<Tensor> = (0..8)
        .map(|i| {
            let n = 1536 * 1024;
            let data = bf16_weights(20 + i, n);
            tensor(&format!("layer.{i}.weight"), "BF16", &[1536, 1024], data)
        })
        .collect();
    packed(build(&tensors, &Extras::default()))
}

/// A mount's memory for fetched bytes, an eighth of the archive of
/// `weights`, and a fourth of its read-ahead (8M of decoded bytes).
const SMALL_CACHES: [&str; 2] = ["--fetch-cache-size", "2M"];

#[test]
fn loads_through_caches_smaller_than_the_archive_fetch_each_byte_about_once() {
    let big = weights();
    let archive_len = std::fs::metadata(&big.archive).unwrap().len();
    let server = moto();
    server.upload(big.archive.parent().unwrap(), "w");
    let url = format!("s3://{BUCKET}/w");
    // At most 1% more than the archive, and a few blocks: a block fetched
    // again where a read's record was being decoded for read-ahead as the
    // read asked for it, never whole windows or records decoded twice.
    let block = brevis::remote::BLOCK;
    let bound = archive_len + archive_len / 100 + 4 * block;

    let seq = mount_store(&url, server.port, &SMALL_CACHES);
    let whole = std::fs::read(seq.path("m.safetensors")).unwrap();
    assert!(whole == big.original);
    let sequential = fetched(&seq);

    // As a loader that maps the file and touches it on two threads: two
    // streams, from the start and from the middle, faulting pages in
    // turns.
    let mapped = mount_store(&url, server.port, &SMALL_CACHES);
    let file = std::fs::File::open(mapped.path("m.safetensors")).unwrap();
    // SAFETY: the mount is read-only and no one changes the archive.
    let map = unsafe { memmap2::Mmap::map(&file) }.unwrap();
    let half = map.len() / 2;
    let (first, second) = std::thread::scope(|scope| {
        let a = scope.spawn(|| map[..half].to_vec());
        let b = scope.spawn(|| map[half..].to_vec());
        (a.join().unwrap(), b.join().unwrap())
    });
    assert!(first == big.original[..half] && second == big.original[half..]);
    let two_streams = fetched(&mapped);
    eprintln!(
        "fetched for an archive of {archive_len}: {sequential} reading it whole, \
         {two_streams} mapped and read by two streams"
    );
    for (how, bytes) in [("whole", sequential), ("two streams", two_streams)] {
        assert!(
            bytes >= archive_len && bytes <= bound,
            "{how}: {bytes} bytes fetched for an archive of {archive_len}"
        );
    }
    assert!(seq.log_text().is_empty(), "{}", seq.log_text());
    assert!(mapped.log_text().is_empty(), "{}", mapped.log_text());
}

/// What the proxy does to requests.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u8)]
enum Fault {
    None = 0,
    /// Holds the request unanswered.
    Stall = 1,
    /// Answers 500 Internal Server Error.
    Error500 = 2,
    /// Closes the connection.
    Drop = 3,
    /// Closes the connection of PUT requests (uploads of objects and of
    /// parts), passes the others.
    DropPuts = 4,
}

/// A TCP proxy to `upstream` that applies the current fault to each request
/// it forwards (pooled connections included). Its threads end with the test
/// process.
struct Proxy {
    port: u16,
    fault: Arc<AtomicU8>,
}

impl Proxy {
    fn new(upstream: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let fault = Arc::new(AtomicU8::new(Fault::None as u8));
        let shared = fault.clone();
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let fault = shared.clone();
                std::thread::spawn(move || relay(client, upstream, &fault));
            }
        });
        Proxy { port, fault }
    }

    fn set(&self, fault: Fault) {
        self.fault.store(fault as u8, Ordering::SeqCst);
    }
}

fn relay(mut client: TcpStream, upstream: u16, fault: &AtomicU8) {
    let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else {
        return;
    };
    let (mut from_server, mut to_client) =
        (server.try_clone().unwrap(), client.try_clone().unwrap());
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut from_server, &mut to_client);
        let _ = to_client.shutdown(std::net::Shutdown::Both);
    });
    let mut to_server = server;
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let n = match client.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let now = fault.load(Ordering::SeqCst);
        if now == Fault::Stall as u8 {
            let start = Instant::now();
            while fault.load(Ordering::SeqCst) == Fault::Stall as u8
                && start.elapsed() < Duration::from_secs(120)
            {
                std::thread::sleep(Duration::from_millis(20));
            }
            break;
        }
        if now == Fault::Error500 as u8 {
            let _ = client.write_all(
                b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            );
            break;
        }
        let put = buf[..n].starts_with(b"PUT ");
        let dropped = now == Fault::Drop as u8 || (now == Fault::DropPuts as u8 && put);
        if dropped || to_server.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = client.shutdown(std::net::Shutdown::Both);
    let _ = to_server.shutdown(std::net::Shutdown::Both);
}

/// A mount that gives up on a fetch after 2 s and one retry, and fetches
/// only what reads ask for.
const IMPATIENT_READS_ONLY: [&str; 6] = [
    "--remote-timeout",
    "2",
    "--retries",
    "1",
    "--read-ahead",
    "0",
];

#[test]
fn network_faults_fail_reads_with_eio_in_bounded_time_never_wrong_bytes() {
    let big = big(6);
    let archive = brevis::Archive::open(&big.archive).unwrap();
    let server = moto();
    server.upload(big.archive.parent().unwrap(), "f");
    let proxy = Proxy::new(server.port);
    let url = format!("s3://{BUCKET}/f");
    // No read-ahead: a first read from the start would fetch the whole
    // archive behind it, and a fault set after that would meet no fetch.
    let m = mount_store(&url, proxy.port, &IMPATIENT_READS_ONLY);
    let file = open_direct(&m.path("m.safetensors"));
    assert!(read_range(&file, 0, 4096).unwrap() == big.original[..4096]);
    // Bytes far apart (the file's first chunks are small tensors' ones), so
    // that no fetch has reached their chunks.
    let faults = [Fault::Stall, Fault::Error500, Fault::Drop];
    let offsets: Vec<u64> = (1..=3).map(|k| k * archive.len() / 4).collect();
    for (fault, &at) in faults.iter().zip(&offsets) {
        proxy.set(*fault);
        let start = Instant::now();
        let got = read_range(&file, at, 4096);
        let took = start.elapsed();
        proxy.set(Fault::None);
        assert!(is_eio(&got), "{fault:?}: {:?}", got.map(|b| b.len()));
        assert!(took < Duration::from_secs(20), "{fault:?}: took {took:?}");
        eprintln!("{fault:?}: EIO after {took:?}");
    }
    // The store back, the same reads give the right bytes.
    for &at in &offsets {
        let got = read_range(&file, at, 4096).unwrap();
        assert!(got == big.original[at as usize..at as usize + 4096]);
    }
    assert!(std::fs::read(m.path("m.safetensors")).unwrap() == big.original);
    let log = m.log_text();
    assert!(
        log.contains(&format!("s3://{BUCKET}/f/m.brv"))
            && log.contains("cannot read the records at bytes"),
        "{log}"
    );
    assert!(stats(&m)["errors"].as_u64().unwrap() >= 3);
}

#[test]
fn a_killed_server_fails_reads_with_eio_without_hanging() {
    let big = big(7);
    let archive = brevis::Archive::open(&big.archive).unwrap();
    let mut server = moto();
    server.upload(big.archive.parent().unwrap(), "k");
    let url = format!("s3://{BUCKET}/k");
    // No read-ahead: each read fetches only its own records.
    let m = mount_store(&url, server.port, &IMPATIENT_READS_ONLY);
    let path = m.path("m.safetensors");
    // Reads of every chunk in a scrambled order (no sequential window), the
    // server killed after a few.
    let n = archive.chunks().len();
    let order: Vec<usize> = (0..n).map(|k| (k * 37) % n).collect();
    let done = Arc::new(AtomicUsize::new(0));
    let reader = {
        let (done, original) = (done.clone(), big.original.clone());
        let starts: Vec<u64> = order
            .iter()
            .map(|&i| archive.chunk_range(i).start)
            .collect();
        std::thread::spawn(move || {
            let file = open_direct(&path);
            let (mut ok, mut failed) = (0, 0);
            for at in starts {
                let len = 4096.min(original.len() - at as usize);
                let got = read_range(&file, at, len);
                match &got {
                    Ok(bytes) => {
                        assert!(
                            bytes[..] == original[at as usize..at as usize + len],
                            "wrong bytes at {at}"
                        );
                        ok += 1;
                    }
                    Err(_) => {
                        assert!(is_eio(&got), "{got:?}");
                        failed += 1;
                    }
                }
                done.fetch_add(1, Ordering::SeqCst);
            }
            (ok, failed)
        })
    };
    let start = Instant::now();
    while done.load(Ordering::SeqCst) < 5 {
        assert!(start.elapsed() < Duration::from_secs(30), "reads too slow");
        std::thread::sleep(Duration::from_millis(5));
    }
    server.stop();
    let (ok, failed) = reader.join().unwrap();
    eprintln!(
        "server killed: {ok} reads right, {failed} EIO, {:?} in all",
        start.elapsed()
    );
    assert!(ok >= 5 && failed > 0, "{ok} right, {failed} failed");
    assert!(start.elapsed() < Duration::from_secs(90));
    // The mount itself still answers.
    assert!(std::fs::metadata(&m.point).unwrap().is_dir());
}

#[test]
fn a_replaced_object_never_mixes_with_cached_bytes() {
    let (old, new) = (big(8), big(9));
    let server = moto();
    server.upload(old.archive.parent().unwrap(), "r");
    let url = format!("s3://{BUCKET}/r");
    let cache = tempfile::tempdir().unwrap();
    // No read-ahead: the far read below must reach the store.
    let options = [
        "--ttl",
        "1",
        "--disk-cache",
        s(cache.path()),
        "--disk-cache-size",
        "64M",
        "--read-ahead",
        "0",
    ];
    let m = mount_store(&url, server.port, &options);
    let handle = open_direct(&m.path("m.safetensors"));
    assert!(read_range(&handle, 0, 4096).unwrap() == old.original[..4096]);

    server.upload(new.archive.parent().unwrap(), "r");
    // The open handle reads the old version or fails; never the new bytes.
    let far = old.original.len() as u64 * 3 / 4;
    let got = read_range(&handle, far, 4096);
    assert!(is_eio(&got), "{:?}", got.map(|b| b.len()));
    match read_range(&handle, 0, 4096) {
        Ok(bytes) => assert!(bytes == old.original[..4096], "mixed bytes"),
        Err(e) => assert_eq!(e.raw_os_error(), Some(libc::EIO)),
    }
    assert!(
        m.log_text().contains("changed since it was opened"),
        "{}",
        m.log_text()
    );
    // Opened again after the attribute timeout: the new version, whole.
    std::thread::sleep(Duration::from_millis(1500));
    assert!(std::fs::read(m.path("m.safetensors")).unwrap() == new.original);

    // Another mount on the same disk cache serves the new version from it.
    let again = mount_store(&url, server.port, &options);
    assert!(std::fs::read(again.path("m.safetensors")).unwrap() == new.original);
    let counters = stats(&again);
    let new_len = std::fs::metadata(&new.archive).unwrap().len();
    let hits = counters["disk_hit_bytes"].as_u64().unwrap();
    eprintln!("second mount: {counters}");
    assert!(hits > new_len / 2, "{hits} bytes from the disk cache");
    assert!(counters["fetched_bytes"].as_u64().unwrap() < new_len / 2);
    drop(old.dir);
}

impl Moto {
    /// Downloads every object under `prefix` into `dir`, at its path
    /// relative to the prefix.
    fn download(&self, prefix: &str, dir: &Path) {
        self.python(
            "import os\n\
             for page in s3.get_paginator('list_objects_v2').paginate(Bucket=args[0], Prefix=args[1] + '/'):\n    \
             for o in page.get('Contents', []):\n        \
             out = os.path.join(args[2], o['Key'][len(args[1]) + 1:])\n        \
             os.makedirs(os.path.dirname(out), exist_ok=True)\n        \
             s3.download_file(args[0], o['Key'], out)\n",
            &[BUCKET, prefix, dir.to_str().unwrap()],
        );
    }

    /// Each object under `prefix` as `key etag last-modified`, one a line.
    fn listing(&self, prefix: &str) -> String {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("listing");
        self.python(
            "lines = []\n\
             for page in s3.get_paginator('list_objects_v2').paginate(Bucket=args[0], Prefix=args[1] + '/'):\n    \
             lines += ['%s %s %s' % (o['Key'], o['ETag'], o['LastModified'].isoformat()) for o in page.get('Contents', [])]\n\
             open(args[2], 'w').write('\\n'.join(sorted(lines)))\n",
            &[BUCKET, prefix, out.to_str().unwrap()],
        );
        std::fs::read_to_string(out).unwrap()
    }

    fn delete(&self, key: &str) {
        self.python(
            "s3.delete_object(Bucket=args[0], Key=args[1])\n",
            &[BUCKET, key],
        );
    }

    /// `brevis pack --chunk-size CHUNK ARGS...` against this server, started.
    fn pack(&self, args: &[&str]) -> Child {
        pack_at(self.port, args)
    }
}

/// `brevis pack --chunk-size CHUNK ARGS...` against the store at `port`
/// (moto, or a proxy to it), started.
fn pack_at(port: u16, args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_brevis"))
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("AWS_REGION", "us-east-1")
        .env("AWS_ENDPOINT_URL", format!("http://127.0.0.1:{port}"))
        .args(["pack", "--chunk-size", CHUNK])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits for every process of `children`; each must succeed. Their outputs.
fn all_succeed(children: Vec<Child>) -> String {
    let mut text = String::new();
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        text += &String::from_utf8_lossy(&out.stdout);
    }
    text
}

/// Asserts that the folders `a` and `b` hold the same files, byte for byte.
fn same_tree(a: &Path, b: &Path) {
    let (mut fa, mut fb) = (files(a), files(b));
    fa.sort();
    fb.sort();
    assert_eq!(fa, fb);
    for rel in fa {
        let same = std::fs::read(a.join(&rel)).unwrap() == std::fs::read(b.join(&rel)).unwrap();
        assert!(same, "{} differs", rel.display());
    }
}

#[test]
fn shards_pack_from_a_store_to_a_store_as_one_local_pack_and_resume() {
    let model = model();
    let server = moto();
    server.upload(&model.originals, "hub/src");
    let (src, dst) = (
        format!("s3://{BUCKET}/hub/src"),
        format!("s3://{BUCKET}/hub/dst"),
    );
    let shard = |i: usize| {
        let spec = format!("{i}/3");
        server.pack(&["--shard", &spec, &src, &dst])
    };
    all_succeed((0..3).map(shard).collect());
    let got = tempfile::tempdir().unwrap();
    server.download("hub/dst", got.path());
    same_tree(got.path(), &model.archives);

    // Run again, every output is kept: nothing is packed or uploaded.
    let before = server.listing("hub/dst");
    let again = all_succeed((0..3).map(shard).collect());
    assert_eq!(again.matches("packed 0 file(s):").count(), 3, "{again}");
    assert_eq!(server.listing("hub/dst"), before);

    // A deleted output is written again, by its shard alone.
    server.delete("hub/dst/shards/part-2.brv");
    let again = all_succeed((0..3).map(shard).collect());
    assert_eq!(again.matches("packed 1 file(s):").count(), 1, "{again}");
    let got = tempfile::tempdir().unwrap();
    server.download("hub/dst", got.path());
    same_tree(got.path(), &model.archives);

    // An output longer than one part goes up as a multipart upload (an
    // ETag ending in -PARTS), whole.
    let big = tempfile::tempdir().unwrap();
    let weights = noise(4, (16 << 20) + 5000);
    write_temp(big.path(), "weights.bin", &weights);
    server.upload(big.path(), "hub/big");
    let to = format!("s3://{BUCKET}/hub/big-out");
    all_succeed(vec![server.pack(&[
        "-q",
        &format!("s3://{BUCKET}/hub/big"),
        &to,
    ])]);
    assert!(
        server.listing("hub/big-out").contains("-2\""),
        "one PUT, not two parts"
    );
    let got = tempfile::tempdir().unwrap();
    server.download("hub/big-out", got.path());
    assert!(std::fs::read(got.path().join("weights.bin")).unwrap() == weights);

    // A multipart upload whose parts fail leaves nothing under the final
    // key, and the error says which.
    let proxy = Proxy::new(server.port);
    proxy.set(Fault::DropPuts);
    let to = format!("s3://{BUCKET}/hub/big-fail");
    let failed = pack_at(proxy.port, &["-q", &format!("s3://{BUCKET}/hub/big"), &to]);
    let out = failed.wait_with_output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("{to}/weights.bin: ")), "{err}");
    eprintln!("a failed upload: {err}");
    assert_eq!(server.listing("hub/big-fail"), "");
    proxy.set(Fault::None);
    all_succeed(vec![pack_at(
        proxy.port,
        &["-q", &format!("s3://{BUCKET}/hub/big"), &to],
    )]);
    assert!(server.listing("hub/big-fail").contains("weights.bin"));

    // From the store to a local folder.
    let local = tempfile::tempdir().unwrap();
    let out = local.path().join("packed");
    all_succeed(vec![server.pack(&["-q", &src, s(&out)])]);
    same_tree(&out, &model.archives);
    // And from a local folder to the store.
    all_succeed(vec![server.pack(&[
        "-q",
        s(&model.originals),
        &format!("s3://{BUCKET}/hub/up"),
    ])]);
    let got = tempfile::tempdir().unwrap();
    server.download("hub/up", got.path());
    same_tree(got.path(), &model.archives);
    // A source replaced in the store is packed (here: copied) again.
    let changed = tempfile::tempdir().unwrap();
    write_temp(changed.path(), "config.json", br#"{"hidden_size": 16}"#);
    server.upload(changed.path(), "hub/src");
    let again = all_succeed((0..3).map(shard).collect());
    assert_eq!(again.matches("(+1 copied)").count(), 1, "{again}");
    let got = tempfile::tempdir().unwrap();
    server.download("hub/dst", got.path());
    let config = std::fs::read(got.path().join("config.json")).unwrap();
    assert_eq!(config, br#"{"hidden_size": 16}"#);

    // An error names the URL and why.
    let missing = server.pack(&[&format!("s3://{BUCKET}/nothing"), s(&out)]);
    let out = missing.wait_with_output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("s3://models/nothing: no objects"), "{err}");
}

/// `brevis` with the AWS environment pointing at moto on `port`.
fn brevis_on_store(port: u16, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_brevis"))
        .args(args)
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("AWS_REGION", "us-east-1")
        .env("AWS_ENDPOINT_URL", format!("http://127.0.0.1:{port}"))
        .output()
        .unwrap()
}

#[test]
fn verify_and_unpack_read_an_archive_where_it_is_stored() {
    let big = big(11);
    let server = moto();
    server.upload(big.archive.parent().unwrap(), "one");
    let url = format!("s3://{BUCKET}/one/m.brv");
    let verified = brevis_on_store(server.port, &["verify", &url]);
    let said = String::from_utf8_lossy(&verified.stdout);
    assert!(
        verified.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&verified.stderr)
    );
    assert!(said.contains("OK"), "{said}");

    let out = big.dir.path().join("restored");
    std::fs::create_dir(&out).unwrap();
    let unpacked = brevis_on_store(server.port, &["unpack", "-q", &url, s(&out)]);
    assert!(
        unpacked.status.success(),
        "{}",
        String::from_utf8_lossy(&unpacked.stderr)
    );
    assert!(std::fs::read(out.join("m.safetensors")).unwrap() == big.original);

    // A missing object: an error naming its URL, nothing written.
    let missing = format!("s3://{BUCKET}/one/none.brv");
    for args in [vec!["verify", &missing], vec!["unpack", &missing, s(&out)]] {
        let failed = brevis_on_store(server.port, &args);
        let err = String::from_utf8_lossy(&failed.stderr);
        assert!(!failed.status.success() && err.contains(&missing), "{err}");
    }
    assert!(!out.join("none.safetensors").exists());
}

#[test]
fn a_delta_packed_against_a_base_in_the_store_unpacks_to_its_original() {
    let big = big(13);
    let server = moto();
    server.upload(big.archive.parent().unwrap(), "hub/base");
    // A fine-tune: the base's original with its last bytes changed.
    let mut tuned = big.original.clone();
    let n = tuned.len();
    tuned[n - 3000..].iter_mut().for_each(|b| *b ^= 1);
    let src = write_temp(big.dir.path(), "tuned.safetensors", &tuned);
    let base = format!("s3://{BUCKET}/hub/base/m.brv");
    let dst = format!("s3://{BUCKET}/hub/tuned/m.brv");
    let packed = server.pack(&["-q", "--base", &base, s(&src), &dst]);
    all_succeed(vec![packed]);

    // Read where it is stored, its base found beside it.
    let out = big.dir.path().join("restored");
    let unpacked = brevis_on_store(server.port, &["unpack", "-q", &dst, s(&out)]);
    let err = String::from_utf8_lossy(&unpacked.stderr);
    assert!(unpacked.status.success(), "{err}");
    assert!(std::fs::read(&out).unwrap() == tuned);
    // Stored against the base (named ../base/m.brv): a fraction of it.
    let got = tempfile::tempdir().unwrap();
    server.download("hub", got.path());
    let delta = std::fs::metadata(got.path().join("tuned/m.brv"))
        .unwrap()
        .len();
    let alone = std::fs::metadata(&big.archive).unwrap().len();
    assert!(
        delta * 4 < alone,
        "{delta} bytes against the base, {alone} alone"
    );
    let local = brevis::Archive::open(got.path().join("tuned/m.brv")).unwrap();
    assert_eq!(local.bases().len(), 1);
    let mut read = vec![0u8; tuned.len()];
    local.read_at(0, &mut read).unwrap();
    assert!(read == tuned);

    // A missing base, a base in another bucket and a local DST: errors
    // naming the base's URL, nothing written.
    let missing = format!("s3://{BUCKET}/hub/none.brv");
    let elsewhere = "s3://other/hub/base/m.brv".to_string();
    let to_local = big.dir.path().join("local.brv");
    for (base, dst, why) in [
        (&missing, dst.as_str(), "no such object"),
        (
            &elsewhere,
            dst.as_str(),
            "must be an archive in s3://models",
        ),
        (&base, s(&to_local), "needs DST in the same store"),
    ] {
        let failed = brevis_on_store(server.port, &["pack", "-q", "--base", base, s(&src), dst]);
        let err = String::from_utf8_lossy(&failed.stderr);
        assert!(!failed.status.success(), "{base} -> {dst}");
        assert!(err.contains(base.as_str()) && err.contains(why), "{err}");
    }
    assert!(!to_local.exists());
    assert!(!server.listing("hub").contains("none"));
}
