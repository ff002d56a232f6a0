//! A read-only S3 endpoint over a folder, for the benches of loading from
//! object storage (scripts/bench/s3_load.sh): `GET /BUCKET/KEY` (whole, or
//! one `Range: bytes=A-B`) and `HEAD` answer from the file ROOT/BUCKET/KEY,
//! with an ETag made of its size and modification time, and honour
//! `If-Match`; signatures are not checked and nothing can be written or
//! listed. Bodies go out with `std::io::copy` from the file (sendfile), so
//! that a load measures its client, not the server.
//!
//!   s3_files PORT ROOT

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (Some(port), Some(root)) = (args.get(1).and_then(|p| p.parse::<u16>().ok()), args.get(2))
    else {
        eprintln!("usage: s3_files PORT ROOT");
        std::process::exit(2);
    };
    let root = PathBuf::from(root);
    let listener = TcpListener::bind(("127.0.0.1", port)).unwrap();
    for stream in listener.incoming().flatten() {
        let root = root.clone();
        std::thread::spawn(move || {
            let _ = serve(stream, &root);
        });
    }
}

/// One request: its method, path and the headers this server reads.
struct Request {
    method: String,
    path: String,
    range: Option<String>,
    if_match: Option<String>,
    body: u64,
}

/// Answers the requests of one connection until the client closes it.
fn serve(stream: TcpStream, root: &Path) -> std::io::Result<()> {
    stream.set_nodelay(true)?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut out = stream;
    while let Some(request) = read_request(&mut reader)? {
        // Bodies (of writes, which are refused) are read past.
        std::io::copy(&mut (&mut reader).take(request.body), &mut std::io::sink())?;
        answer(&request, root, &mut out)?;
    }
    Ok(())
}

fn read_request(reader: &mut impl BufRead) -> std::io::Result<Option<Request>> {
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Ok(None);
    }
    let mut parts = line.split_whitespace();
    let (method, target) = (
        parts.next().unwrap_or("").to_string(),
        parts.next().unwrap_or(""),
    );
    // A target may be a whole URL (`http://host:port/bucket/key`).
    let target = match target.split_once("://") {
        Some((_, rest)) => rest.find('/').map_or("/", |at| &rest[at..]),
        None => target,
    };
    let path = target.split('?').next().unwrap_or("").to_string();
    let mut request = Request {
        method,
        path,
        range: None,
        if_match: None,
        body: 0,
    };
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header)? == 0 || header.trim().is_empty() {
            break;
        }
        let Some((name, value)) = header.split_once(':') else {
            continue;
        };
        let value = value.trim().to_string();
        match name.trim().to_ascii_lowercase().as_str() {
            "range" => request.range = Some(value),
            "if-match" => request.if_match = Some(value),
            "content-length" => request.body = value.parse().unwrap_or(0),
            _ => {}
        }
    }
    Ok(Some(request))
}

fn answer(request: &Request, root: &Path, out: &mut TcpStream) -> std::io::Result<()> {
    let key = decode_path(request.path.trim_start_matches('/'));
    let file = (!key.split('/').any(|part| part == ".." || part.is_empty()))
        .then(|| File::open(root.join(&key)).ok())
        .flatten()
        .filter(|f| f.metadata().is_ok_and(|m| m.is_file()));
    let Some(mut file) = file else {
        return status(
            out,
            "404 Not Found",
            "<Error><Code>NoSuchKey</Code></Error>",
        );
    };
    if request.method != "GET" && request.method != "HEAD" {
        return status(out, "405 Method Not Allowed", "");
    }
    let meta = file.metadata()?;
    let len = meta.len();
    let secs = meta
        .modified()?
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let etag = format!("\"{len:x}-{secs:x}\"");
    if request
        .if_match
        .as_ref()
        .is_some_and(|m| m != "*" && *m != etag)
    {
        return status(
            out,
            "412 Precondition Failed",
            "<Error><Code>PreconditionFailed</Code></Error>",
        );
    }
    let (code, start, end) = match request.range.as_deref().and_then(|r| parse_range(r, len)) {
        Some((start, end)) => ("206 Partial Content", start, end),
        None if request.range.is_some() => {
            return status(out, "416 Range Not Satisfiable", "");
        }
        None => ("200 OK", 0, len),
    };
    let mut head = format!(
        "HTTP/1.1 {code}\r\nContent-Length: {}\r\nETag: {etag}\r\nLast-Modified: {}\r\n\
         Accept-Ranges: bytes\r\nContent-Type: application/octet-stream\r\n",
        end - start,
        http_date(secs)
    );
    if code.starts_with("206") {
        head += &format!("Content-Range: bytes {start}-{}/{len}\r\n", end - 1);
    }
    head += "\r\n";
    out.write_all(head.as_bytes())?;
    if request.method == "GET" {
        file.seek(SeekFrom::Start(start))?;
        std::io::copy(&mut file.take(end - start), out)?;
    }
    Ok(())
}

fn status(out: &mut TcpStream, code: &str, body: &str) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {code}\r\nContent-Length: {}\r\nContent-Type: application/xml\r\n\r\n{body}",
        body.len()
    );
    out.write_all(head.as_bytes())
}

/// `bytes=A-B`, `bytes=A-` or `bytes=-N` within `len`, as a half-open range.
fn parse_range(range: &str, len: u64) -> Option<(u64, u64)> {
    let (first, last) = range.strip_prefix("bytes=")?.split_once('-')?;
    let (start, end) = match (first.parse::<u64>().ok(), last.parse::<u64>().ok()) {
        (Some(a), Some(b)) => (a, b.saturating_add(1).min(len)),
        (Some(a), None) => (a, len),
        (None, Some(n)) => (len.saturating_sub(n), len),
        (None, None) => return None,
    };
    (start < end).then_some((start, end))
}

/// `%XX` escapes of a request path decoded.
fn decode_path(path: &str) -> String {
    let bytes = path.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok());
        match (bytes[i], hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `secs` since the epoch as an HTTP date (`Sun, 06 Dec 2026 01:02:03 GMT`).
fn http_date(secs: u64) -> String {
    let (days, rest) = ((secs / 86_400) as i64, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    const WEEKDAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    format!(
        "{}, {day:02} {} {year} {:02}:{:02}:{:02} GMT",
        WEEKDAYS[days.rem_euclid(7) as usize],
        MONTHS[(month - 1) as usize],
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}
