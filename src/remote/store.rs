//! The object-store client: which store a URL names (`s3://`, `gs://`,
//! `az://` and Azure's `abfs[s]://`/`azure://`, `http(s)://`), how to reach it
//! (each cloud's usual environment variables, timeouts, retries with backoff
//! and jitter), and
//! blocking calls with bounded waits for the threads of the mount, which are
//! not async. Every byte fetched is counted.

use object_store::path::Path as Key;
use object_store::{
    BackoffConfig, ClientConfigKey, GetOptions, GetRange, ObjectMeta, ObjectStore, ObjectStoreExt,
    RetryConfig,
};
use std::future::Future;
use std::io;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// How requests to the store behave.
#[derive(Clone, Debug)]
pub struct RemoteOptions {
    /// Longest wait for one request, retries included: after it the read
    /// that needed the bytes fails (EIO through the mount).
    pub timeout: Duration,
    /// Retries of a request that failed with a server error, a timeout or a
    /// dropped connection, after waits that grow from 100 ms with jitter.
    pub retries: usize,
}

impl Default for RemoteOptions {
    fn default() -> Self {
        RemoteOptions {
            timeout: Duration::from_secs(60),
            retries: 5,
        }
    }
}

/// What the store says about one object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectInfo {
    /// Key relative to the bucket (or the HTTP server's root).
    pub key: String,
    pub len: u64,
    pub modified: SystemTime,
    /// Identifies this version of the object: its ETag, or (from servers
    /// without ETags) `UNTAGGED`, its size and modification time.
    pub version: String,
    /// Whether GETs can be made conditional on `version` (an ETag).
    pub etag: bool,
}

/// How the version of an object without ETag starts (an ETag never does).
pub const UNTAGGED: char = '~';

/// Counters of the traffic with the store.
#[derive(Default, Debug)]
pub struct Stats {
    /// Bytes of object data received (ranged GETs only).
    pub fetched_bytes: AtomicU64,
    /// Requests made (GET, HEAD, LIST), retries not counted.
    pub requests: AtomicU64,
    /// Bytes served from the disk cache instead of the store.
    pub disk_hit_bytes: AtomicU64,
    /// Fetches that failed (after retries), each logged.
    pub errors: AtomicU64,
}

impl Stats {
    /// The counters as one JSON object.
    pub fn to_json(&self) -> String {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        format!(
            "{{\"fetched_bytes\":{},\"requests\":{},\"disk_hit_bytes\":{},\"errors\":{}}}",
            get(&self.fetched_bytes),
            get(&self.requests),
            get(&self.disk_hit_bytes),
            get(&self.errors)
        )
    }
}

/// A bucket (or HTTP server) and the runtime its requests run on.
pub struct Store {
    client: Arc<dyn ObjectStore>,
    /// Owned here: the callers block on it from plain threads.
    runtime: tokio::runtime::Runtime,
    /// `s3://bucket` or `https://host`: how paths of archives are written.
    root: String,
    options: RemoteOptions,
    pub stats: Stats,
}

/// The URL schemes of object storage: S3, Google Cloud Storage, Azure
/// (as object_store parses them) and web servers.
const SCHEMES: [&str; 8] = [
    "s3://", "gs://", "az://", "abfs://", "abfss://", "azure://", "http://", "https://",
];

/// Whether `url` names object storage rather than a local path.
pub fn is_remote(url: &str) -> bool {
    SCHEMES.iter().any(|scheme| url.starts_with(scheme))
}

/// Splits `s3://bucket/a/b` into (`s3://bucket`, `a/b`).
pub fn split_url(url: &str) -> io::Result<(String, String)> {
    let invalid = || {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("not a store URL: {url}"),
        )
    };
    let (scheme, rest) = url.split_once("://").ok_or_else(invalid)?;
    let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
    if host.is_empty() {
        return Err(invalid());
    }
    Ok((
        format!("{scheme}://{host}"),
        path.trim_matches('/').to_string(),
    ))
}

impl Store {
    /// Connects to the store of `url` (`s3://BUCKET/...`, `gs://BUCKET/...`,
    /// `az://CONTAINER/...`, or `http(s)://HOST/...` for a plain web server
    /// answering range requests), configured from the environment variables
    /// of its cloud (`AWS_*`, `GOOGLE_*`, `AZURE_*`).
    pub fn connect(url: &str, options: RemoteOptions) -> io::Result<Store> {
        let (root, _) = split_url(url)?;
        let client = build_client(&root, &options).map_err(io::Error::other)?;
        Store::with_client(client, root, options)
    }

    /// A store reached through `client`, whose paths are written under `root`.
    pub fn with_client(
        client: Arc<dyn ObjectStore>,
        root: String,
        options: RemoteOptions,
    ) -> io::Result<Store> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("brevis-remote")
            .enable_all()
            .build()?;
        Ok(Store {
            client,
            runtime,
            root,
            options,
            stats: Stats::default(),
        })
    }

    /// `s3://bucket` or `https://host`.
    pub fn root(&self) -> &str {
        &self.root
    }

    /// The runtime the requests run on.
    #[cfg(test)]
    pub fn runtime(&self) -> &tokio::runtime::Runtime {
        &self.runtime
    }

    /// The longest wait for one request, retries included.
    pub fn timeout(&self) -> Duration {
        self.options.timeout
    }

    /// Starts `request` on the runtime, bounded by the timeout. (Spawned, so
    /// that a request given up on is dropped where it runs.)
    fn spawn<T: Send + 'static>(
        &self,
        request: impl Future<Output = object_store::Result<T>> + Send + 'static,
    ) -> Pending<T> {
        self.stats.requests.fetch_add(1, Ordering::Relaxed);
        let limit = self.options.timeout;
        // The timer is made inside the task: it needs the runtime's context.
        self.runtime
            .spawn(async move { tokio::time::timeout(limit, request).await })
    }

    /// Waits for a request started by `spawn`; `what` names it in errors
    /// (which callers attach to the archive they concern).
    fn wait<T>(&self, what: impl FnOnce() -> String, pending: Pending<T>) -> io::Result<T> {
        match self.runtime.block_on(pending) {
            Ok(Ok(Ok(value))) => Ok(value),
            Ok(Ok(Err(e))) => Err(store_error(e, what())),
            Ok(Err(_)) => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("{}: no answer within {:?}", what(), self.options.timeout),
            )),
            Err(e) => Err(io::Error::other(format!("{}: {e}", what()))),
        }
    }

    /// Runs `request` and waits for it at most the timeout.
    fn block<T: Send + 'static>(
        &self,
        what: impl FnOnce() -> String,
        request: impl Future<Output = object_store::Result<T>> + Send + 'static,
    ) -> io::Result<T> {
        let pending = self.spawn(request);
        self.wait(what, pending)
    }

    /// The object at `key`, or None if there is none.
    pub fn head(&self, key: &str) -> io::Result<Option<ObjectInfo>> {
        let client = self.client.clone();
        let path = key_path(key);
        let found = self.block(|| "HEAD".into(), async move { client.head(&path).await });
        match found {
            Ok(meta) => Ok(Some(info(&meta))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The objects and sub-folders directly under folder `dir` ("" for the
    /// root): (objects, folder names).
    pub fn list(&self, dir: &str) -> io::Result<(Vec<ObjectInfo>, Vec<String>)> {
        let client = self.client.clone();
        let prefix = (!dir.is_empty()).then(|| key_path(dir));
        let listed = self.block(|| "listing".into(), async move {
            client.list_with_delimiter(prefix.as_ref()).await
        })?;
        let folders = listed
            .common_prefixes
            .iter()
            .filter_map(|p| p.filename().map(str::to_string))
            .collect();
        Ok((listed.objects.iter().map(info).collect(), folders))
    }

    /// Every object under folder `dir` ("" for the whole store), however
    /// deep, sorted by key. At most [`MAX_LISTED`] objects: a longer listing
    /// is an error rather than an unbounded allocation.
    pub fn list_all(&self, dir: &str) -> io::Result<Vec<ObjectInfo>> {
        use futures_util::StreamExt;
        let client = self.client.clone();
        let prefix = (!dir.is_empty()).then(|| key_path(dir));
        let limit = self.options.timeout;
        self.stats.requests.fetch_add(1, Ordering::Relaxed);
        let what = || "listing".to_string();
        let listed = self.runtime.block_on(async move {
            let mut stream = client.list(prefix.as_ref());
            let mut found = Vec::new();
            // Each page must come within the timeout; the whole listing may
            // take as many pages as it has.
            loop {
                match tokio::time::timeout(limit, stream.next()).await {
                    Err(_) => return Err(None),
                    Ok(None) => return Ok(found),
                    Ok(Some(Err(e))) => return Err(Some(e)),
                    Ok(Some(Ok(meta))) => {
                        if found.len() >= MAX_LISTED {
                            return Err(Some(object_store::Error::Generic {
                                store: "brevis",
                                source: format!("more than {MAX_LISTED} objects").into(),
                            }));
                        }
                        found.push(info(&meta));
                    }
                }
            }
        });
        match listed {
            Ok(mut found) => {
                found.sort_by(|a, b| a.key.cmp(&b.key));
                Ok(found)
            }
            Err(Some(e)) => Err(store_error(e, what())),
            Err(None) => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("{}: no answer within {limit:?}", what()),
            )),
        }
    }

    /// Downloads the object `object` (as listed: a GET conditional on its
    /// ETag, and of exactly its length) into the file at `path`, streaming:
    /// at most one piece of the body is held at a time. Each piece must come
    /// within the timeout. Returns the bytes written.
    pub fn get_file(&self, object: &ObjectInfo, path: &std::path::Path) -> io::Result<u64> {
        use futures_util::StreamExt;
        use std::io::Write;
        let client = self.client.clone();
        let key = key_path(&object.key);
        let options = GetOptions {
            if_match: object.etag.then(|| object.version.clone()),
            ..GetOptions::default()
        };
        let limit = self.options.timeout;
        self.stats.requests.fetch_add(1, Ordering::Relaxed);
        let mut file = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(path)?);
        let expected = object.len;
        let written = self.runtime.block_on(async move {
            let timed_out = || io::Error::new(io::ErrorKind::TimedOut, "no answer in time");
            let got = tokio::time::timeout(limit, client.get_opts(&key, options))
                .await
                .map_err(|_| timed_out())?
                .map_err(|e| store_error(e, "GET".into()))?;
            let mut stream = got.into_stream();
            let mut written = 0u64;
            loop {
                match tokio::time::timeout(limit, stream.next()).await {
                    Err(_) => return Err(timed_out()),
                    Ok(None) => break,
                    Ok(Some(Err(e))) => return Err(store_error(e, "GET".into())),
                    Ok(Some(Ok(piece))) => {
                        written += piece.len() as u64;
                        if written > expected {
                            return Err(io::Error::other(format!(
                                "the store sent more than the listed {expected} bytes"
                            )));
                        }
                        file.write_all(&piece)?;
                    }
                }
            }
            file.into_inner().map_err(|e| e.into_error())?.sync_all()?;
            Ok(written)
        });
        let written = written?;
        self.stats
            .fetched_bytes
            .fetch_add(written, Ordering::Relaxed);
        if written != expected {
            return Err(io::Error::other(format!(
                "the store sent {written} bytes, the listing said {expected}"
            )));
        }
        Ok(written)
    }

    /// Uploads the file at `path` to `key`. The object appears whole or not
    /// at all: a file of up to [`PART`] bytes is one PUT, a longer one a
    /// multipart upload of parts of [`PART`] bytes (at most two in flight, so
    /// memory stays bounded) completed only after every part is stored, and
    /// aborted on failure. Each request is retried as reads are, and must be
    /// answered within the timeout. Returns the bytes uploaded.
    pub fn put_file(&self, path: &std::path::Path, key: &str) -> io::Result<u64> {
        use object_store::{PutPayload, WriteMultipart};
        use std::io::Read;
        let mut file = crate::input::open_regular(path)?;
        let len = file.metadata()?.len();
        let client = self.client.clone();
        let target = key_path(key);
        let limit = self.options.timeout;
        let timed_out = || io::Error::new(io::ErrorKind::TimedOut, "no answer in time");
        self.stats.requests.fetch_add(1, Ordering::Relaxed);
        let result: io::Result<()> = if len <= PART as u64 {
            let mut bytes = Vec::with_capacity(len as usize);
            (&mut file).take(len).read_to_end(&mut bytes)?;
            if bytes.len() as u64 != len {
                return Err(io::Error::other("the file changed while being uploaded"));
            }
            self.runtime.block_on(async move {
                tokio::time::timeout(limit, client.put(&target, PutPayload::from(bytes)))
                    .await
                    .map_err(|_| timed_out())?
                    .map_err(|e| store_error(e, "PUT".into()))
                    .map(drop)
            })
        } else {
            self.runtime.block_on(async move {
                let upload = tokio::time::timeout(limit, client.put_multipart(&target))
                    .await
                    .map_err(|_| timed_out())?
                    .map_err(|e| store_error(e, "multipart upload".into()))?;
                let mut writer = WriteMultipart::new_with_chunk_size(upload, PART);
                let mut buf = vec![0u8; PART];
                let mut sent = 0u64;
                let outcome: io::Result<()> = async {
                    loop {
                        let n = read_full(&mut file, &mut buf)?;
                        if n == 0 {
                            break;
                        }
                        sent += n as u64;
                        tokio::time::timeout(limit, writer.wait_for_capacity(2))
                            .await
                            .map_err(|_| timed_out())?
                            .map_err(|e| store_error(e, "part upload".into()))?;
                        writer.write(&buf[..n]);
                    }
                    if sent != len {
                        return Err(io::Error::other("the file changed while being uploaded"));
                    }
                    Ok(())
                }
                .await;
                match outcome {
                    Ok(()) => tokio::time::timeout(limit, writer.finish())
                        .await
                        .map_err(|_| timed_out())?
                        .map_err(|e| store_error(e, "multipart upload".into()))
                        .map(drop),
                    Err(e) => {
                        let _ = tokio::time::timeout(limit, writer.abort()).await;
                        Err(e)
                    }
                }
            })
        };
        result?;
        Ok(len)
    }

    /// Bytes `ranges` of `object`, fetched in parallel, only if it is still
    /// the version described (its ETag, when it has one); anything else,
    /// including a body of another length, is an error for that range.
    pub fn get_ranges(
        &self,
        object: &ObjectInfo,
        ranges: &[Range<u64>],
    ) -> Vec<io::Result<Vec<u8>>> {
        let pending: Vec<_> = ranges
            .iter()
            .map(|range| {
                let client = self.client.clone();
                let path = key_path(&object.key);
                let options = GetOptions {
                    range: Some(GetRange::Bounded(range.clone())),
                    if_match: object.etag.then(|| object.version.clone()),
                    ..GetOptions::default()
                };
                let asked = range.clone();
                self.spawn(async move {
                    let result = client.get_opts(&path, options).await?;
                    let sent = result.range.clone();
                    read_body(asked, sent, result.into_stream()).await
                })
            })
            .collect();
        ranges
            .iter()
            .zip(pending)
            .map(|(range, pending)| {
                let what = || format!("bytes {range:?}");
                let bytes = self.wait(what, pending)?;
                let fetched = &self.stats.fetched_bytes;
                fetched.fetch_add(bytes.len() as u64, Ordering::Relaxed);
                Ok(bytes)
            })
            .collect()
    }
}

/// The most objects a recursive listing holds.
pub const MAX_LISTED: usize = 1_000_000;

/// Bytes per part of a multipart upload (S3 wants at least 5 MiB).
pub const PART: usize = 16 << 20;

/// Reads until `buf` is full or the file ends; returns the bytes read.
fn read_full(file: &mut std::fs::File, buf: &mut [u8]) -> io::Result<usize> {
    use std::io::Read;
    let mut filled = 0;
    while filled < buf.len() {
        match file.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

type Body = futures_util::stream::BoxStream<'static, object_store::Result<bytes::Bytes>>;

type Pending<T> =
    tokio::task::JoinHandle<Result<object_store::Result<T>, tokio::time::error::Elapsed>>;

/// The body of a GET of the range `asked`, which the store says is `sent`:
/// both must agree, and the body must be exactly that long (a longer one is
/// cut off as soon as it overflows rather than held).
async fn read_body(
    asked: Range<u64>,
    sent: Range<u64>,
    mut stream: Body,
) -> object_store::Result<Vec<u8>> {
    use futures_util::StreamExt;
    let wanted = asked.end - asked.start;
    let wrong = |got: String| object_store::Error::Generic {
        store: "brevis",
        source: format!("asked for bytes {asked:?} ({wanted} bytes), the store sent {got}").into(),
    };
    if sent != asked {
        return Err(wrong(format!("the range {sent:?}")));
    }
    let mut out = Vec::with_capacity(wanted as usize);
    while let Some(piece) = stream.next().await {
        let piece = piece?;
        if (out.len() + piece.len()) as u64 > wanted {
            return Err(wrong("more".into()));
        }
        out.extend_from_slice(&piece);
    }
    if out.len() as u64 != wanted {
        return Err(wrong(out.len().to_string()));
    }
    Ok(out)
}

/// The store path of `key` as written (a key from a listing is one
/// already); escaped only where it is not a valid path as it is.
fn key_path(key: &str) -> Key {
    Key::parse(key).unwrap_or_else(|_| Key::from(key))
}

fn info(meta: &ObjectMeta) -> ObjectInfo {
    let modified = SystemTime::from(meta.last_modified);
    let etag = meta.e_tag.clone();
    ObjectInfo {
        key: meta.location.to_string(),
        len: meta.size,
        modified,
        etag: etag.is_some(),
        version: etag.unwrap_or_else(|| format!("{UNTAGGED}{}@{}", meta.size, meta.last_modified)),
    }
}

/// An object-store error as an I/O error of the matching kind, so that
/// callers can tell a missing object from a failure.
fn store_error(e: object_store::Error, what: String) -> io::Error {
    let kind = match &e {
        object_store::Error::NotFound { .. } => io::ErrorKind::NotFound,
        object_store::Error::Precondition { .. } => io::ErrorKind::StaleNetworkFileHandle,
        _ => io::ErrorKind::Other,
    };
    let message = match kind {
        io::ErrorKind::StaleNetworkFileHandle => {
            format!("{what}: the object changed since it was opened ({e})")
        }
        _ => format!("{what}: {e}"),
    };
    io::Error::new(kind, message)
}

/// The client for `root`, from the environment variables of its cloud.
fn build_client(root: &str, options: &RemoteOptions) -> object_store::Result<Arc<dyn ObjectStore>> {
    let retry = RetryConfig {
        backoff: BackoffConfig {
            init_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(5),
            base: 2.0,
        },
        max_retries: options.retries,
        retry_timeout: options.timeout,
    };
    // One attempt may take at most a third of the whole wait, so that a
    // stalled connection leaves time to retry.
    let attempt = format!("{}ms", (options.timeout / 3).as_millis().max(1));
    if root.starts_with("s3://") {
        use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
        let endpoint = std::env::var("AWS_ENDPOINT_URL").unwrap_or_default();
        let client = AmazonS3Builder::from_env()
            .with_url(root)
            .with_retry(retry)
            .with_config(
                AmazonS3ConfigKey::Client(ClientConfigKey::Timeout),
                &attempt,
            )
            .with_config(
                AmazonS3ConfigKey::Client(ClientConfigKey::ConnectTimeout),
                "5s",
            )
            // An endpoint given as http:// (a local test server) is meant.
            .with_allow_http(endpoint.starts_with("http://"))
            .build()?;
        return Ok(Arc::new(client));
    }
    if root.starts_with("gs://") {
        use object_store::gcp::{GoogleCloudStorageBuilder, GoogleConfigKey};
        let client = GoogleCloudStorageBuilder::from_env()
            .with_url(root)
            .with_retry(retry)
            .with_config(GoogleConfigKey::Client(ClientConfigKey::Timeout), &attempt)
            .with_config(
                GoogleConfigKey::Client(ClientConfigKey::ConnectTimeout),
                "5s",
            )
            .build()?;
        return Ok(Arc::new(client));
    }
    if !root.starts_with("http") {
        // Azure (`AZURE_STORAGE_USE_EMULATOR=true` and
        // `AZURITE_BLOB_STORAGE_URL` for the Azurite emulator).
        use object_store::azure::{AzureConfigKey, MicrosoftAzureBuilder};
        let client = MicrosoftAzureBuilder::from_env()
            .with_url(root)
            .with_retry(retry)
            .with_config(AzureConfigKey::Client(ClientConfigKey::Timeout), &attempt)
            .with_config(
                AzureConfigKey::Client(ClientConfigKey::ConnectTimeout),
                "5s",
            )
            .build()?;
        return Ok(Arc::new(client));
    }
    let client = object_store::http::HttpBuilder::new()
        .with_url(root)
        .with_retry(retry)
        .with_config(ClientConfigKey::Timeout, &attempt)
        .with_config(ClientConfigKey::ConnectTimeout, "5s")
        .with_config(ClientConfigKey::AllowHttp, "true")
        .build()?;
    Ok(Arc::new(client))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(sent: Range<u64>, pieces: Vec<Vec<u8>>) -> Result<Vec<u8>, String> {
        use futures_util::StreamExt;
        let pieces = pieces.into_iter().map(|p| Ok(bytes::Bytes::from(p)));
        let stream = futures_util::stream::iter(pieces).boxed();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        runtime
            .block_on(read_body(0..6, sent, stream))
            .map_err(|e| e.to_string())
    }

    #[test]
    fn bodies_of_another_length_or_range_are_errors() {
        let whole = body(0..6, vec![vec![1, 2], vec![3, 4, 5, 6]]);
        assert_eq!(whole, Ok(vec![1, 2, 3, 4, 5, 6]));
        let short = body(0..6, vec![vec![1, 2, 3]]).unwrap_err();
        assert!(short.contains("(6 bytes), the store sent 3"), "{short}");
        let long = body(0..6, vec![vec![0; 4], vec![0; 4]]).unwrap_err();
        assert!(long.contains("sent more"), "{long}");
        // A body far longer than asked is cut off, not held.
        let huge = body(0..6, vec![vec![0; 4], vec![0; 1 << 20]]).unwrap_err();
        assert!(huge.contains("sent more"), "{huge}");
        let shifted = body(2..8, vec![vec![0; 6]]).unwrap_err();
        assert!(shifted.contains("the range 2..8"), "{shifted}");
    }

    #[test]
    fn urls_split_into_store_and_key() {
        let split = |u: &str| split_url(u).unwrap();
        assert_eq!(
            split("s3://models/llama/"),
            ("s3://models".into(), "llama".into())
        );
        assert_eq!(split("s3://models"), ("s3://models".into(), "".into()));
        assert_eq!(
            split("https://host:8080/a/b.brv"),
            ("https://host:8080".into(), "a/b.brv".into())
        );
        assert!(split_url("s3:///x").is_err());
        assert!(split_url("/local/path").is_err());
        assert!(is_remote("s3://b") && is_remote("https://h/x") && !is_remote("./s3:"));
        assert!(is_remote("gs://b/m.brv") && is_remote("az://c/m.brv"));
        assert_eq!(
            split("abfss://fs@acct.dfs.core.windows.net/a/m.brv"),
            (
                "abfss://fs@acct.dfs.core.windows.net".into(),
                "a/m.brv".into()
            )
        );
    }
}
