//! Just enough of the Redis protocol to ask a server a question: one command out,
//! one reply back (simple string, error, integer, bulk string).

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::Duration;

/// One reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// `+...`
    Simple(String),
    /// `-...`
    Error(String),
    /// `:...`
    Integer(i64),
    /// `$...` (None: the null bulk string).
    Bulk(Option<Vec<u8>>),
}

/// A connection to one server.
pub struct Conn {
    reader: BufReader<TcpStream>,
}

impl Conn {
    /// Connects to 127.0.0.1:`port`.
    pub fn open(port: u16) -> std::io::Result<Self> {
        let s = TcpStream::connect(("127.0.0.1", port))?;
        s.set_read_timeout(Some(Duration::from_secs(30)))?;
        s.set_nodelay(true)?;
        Ok(Self { reader: BufReader::new(s) })
    }

    /// Sends `args` as one command.
    pub fn send(&mut self, args: &[&[u8]]) -> std::io::Result<()> {
        let mut out = Vec::with_capacity(64);
        write!(out, "*{}\r\n", args.len())?;
        for a in args {
            write!(out, "${}\r\n", a.len())?;
            out.extend_from_slice(a);
            out.extend_from_slice(b"\r\n");
        }
        self.reader.get_mut().write_all(&out)
    }

    /// Reads one reply.
    pub fn read(&mut self) -> std::io::Result<Reply> {
        let mut line = String::new();
        self.reader.read_line(&mut line)?;
        let bad = || std::io::Error::new(std::io::ErrorKind::InvalidData, format!("unexpected reply {line:?}"));
        let body = line.trim_end_matches("\r\n");
        let (kind, rest) = body.split_at_checked(1).ok_or_else(bad)?;
        Ok(match kind {
            "+" => Reply::Simple(rest.to_string()),
            "-" => Reply::Error(rest.to_string()),
            ":" => Reply::Integer(rest.parse().map_err(|_| bad())?),
            "$" => {
                let len: i64 = rest.parse().map_err(|_| bad())?;
                if len < 0 {
                    Reply::Bulk(None)
                } else {
                    let mut buf = vec![0u8; len as usize + 2];
                    std::io::Read::read_exact(&mut self.reader, &mut buf)?;
                    buf.truncate(len as usize);
                    Reply::Bulk(Some(buf))
                }
            }
            _ => return Err(bad()),
        })
    }

    /// Sends `args` and reads the reply.
    pub fn call(&mut self, args: &[&[u8]]) -> std::io::Result<Reply> {
        self.send(args)?;
        self.read()
    }
}

/// `PRESCIENT.STATS` of the server at `port`, as (name, value) pairs.
pub fn stats(port: u16) -> std::io::Result<Vec<(String, u64)>> {
    match Conn::open(port)?.call(&[b"PRESCIENT.STATS"])? {
        Reply::Bulk(Some(text)) => Ok(String::from_utf8_lossy(&text)
            .lines()
            .filter_map(|l| l.split_once(':'))
            .filter_map(|(k, v)| Some((k.to_string(), v.trim().parse().ok()?)))
            .collect()),
        other => Err(std::io::Error::other(format!("PRESCIENT.STATS answered {other:?}"))),
    }
}
