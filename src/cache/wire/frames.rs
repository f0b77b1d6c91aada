//! Reading a protobuf watch: length-delimited frames, each a 4-byte big-endian length and
//! then a `meta.v1.WatchEvent` of that many bytes (client-go's
//! `framer.NewLengthDelimitedFrameReader`).
//!
//! # Contract
//! - A frame is appended to the buffer without its length; the buffer is left as it was on
//!   anything but [`Frame::Read`]. A read dropped before it finished (a timeout) leaves the
//!   stream out of step and part of a frame in the buffer: the stream is not read again
//!   (the informer drops it), and the buffer is cut back by whoever keeps it.
//! - A stream that ends at a frame's boundary, or inside a frame (the connection cut), ends
//!   quietly, as a JSON watch cut inside a line does: the informer resumes from the last
//!   event it applied.
//! - A frame longer than [`MAX_FRAME`] is a failure (`InvalidData`), never an allocation of
//!   the length the stream claims.

use std::pin::Pin;

use futures::io::{AsyncBufRead, AsyncReadExt as _};

/// A watch's body as the server sends it, read line by line (JSON) or frame by frame
/// (protobuf).
pub(crate) type Body = Pin<Box<dyn AsyncBufRead + Send>>;

/// The longest frame read: client-go's streaming decoder's limit.
pub(crate) const MAX_FRAME: usize = 16 * 1024 * 1024;

/// What reading one frame gave.
#[derive(Debug)]
pub(crate) enum Frame {
    /// A frame, appended to the buffer.
    Read,
    /// The stream ended (at a frame's end or inside one, or the connection closed).
    End,
    /// The connection failed, or a frame was longer than [`MAX_FRAME`].
    Failed(std::io::Error),
}

/// Appends the next frame of `body` to `into` (module docs).
pub(crate) async fn read_frame(body: &mut Body, into: &mut Vec<u8>) -> Frame {
    let start = into.len();
    let mut length = [0u8; 4];
    if let Err(e) = body.read_exact(&mut length).await {
        return ended(e);
    }
    let length = u32::from_be_bytes(length) as usize;
    if length > MAX_FRAME {
        return Frame::Failed(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("a watch frame of {length} bytes, over the limit of {MAX_FRAME}"),
        ));
    }
    into.resize(start + length, 0);
    match body.read_exact(&mut into[start..]).await {
        Ok(()) => Frame::Read,
        Err(e) => {
            into.truncate(start);
            if e.kind() == std::io::ErrorKind::UnexpectedEof {
                tracing::debug!(length, "a watch stream ended inside a frame");
            }
            ended(e)
        }
    }
}

/// Whether a read error is the connection ending (an unexpected EOF, however nested): the
/// stream ends and is resumed, as when the server ends it.
pub(crate) fn ends_stream(err: &std::io::Error) -> bool {
    let mut current: Option<&(dyn std::error::Error + 'static)> = Some(err);
    for _ in 0..16 {
        let Some(e) = current else { return false };
        if let Some(io) = e.downcast_ref::<std::io::Error>()
            && matches!(io.kind(), std::io::ErrorKind::UnexpectedEof | std::io::ErrorKind::TimedOut)
        {
            return true;
        }
        if e.to_string().contains("unexpected EOF during chunk") {
            return true;
        }
        current = e.source();
    }
    false
}

/// The end of a stream, or its failure.
fn ended(e: std::io::Error) -> Frame {
    match e.kind() {
        std::io::ErrorKind::UnexpectedEof => Frame::End,
        _ if ends_stream(&e) => Frame::End,
        _ => Frame::Failed(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(bytes: Vec<u8>) -> Body {
        Box::pin(futures::io::Cursor::new(bytes))
    }

    fn framed(frames: &[&[u8]]) -> Vec<u8> {
        let mut out = Vec::new();
        for frame in frames {
            out.extend_from_slice(&u32::try_from(frame.len()).unwrap().to_be_bytes());
            out.extend_from_slice(frame);
        }
        out
    }

    #[tokio::test]
    async fn frames_are_read_whole_and_in_order() {
        let mut stream = body(framed(&[b"one", b"", b"three"]));
        let mut buffer = Vec::new();
        for expected in [&b"one"[..], b"", b"three"] {
            buffer.clear();
            assert!(matches!(read_frame(&mut stream, &mut buffer).await, Frame::Read));
            assert_eq!(buffer, expected);
        }
        assert!(matches!(read_frame(&mut stream, &mut buffer).await, Frame::End));
    }

    #[tokio::test]
    async fn a_frame_cut_by_the_end_of_the_stream_ends_it_and_leaves_the_buffer() {
        let mut bytes = framed(&[b"whole", b"cut short"]);
        bytes.truncate(bytes.len() - 3);
        let mut stream = body(bytes);
        let mut buffer = Vec::new();
        assert!(matches!(read_frame(&mut stream, &mut buffer).await, Frame::Read));
        assert!(matches!(read_frame(&mut stream, &mut buffer).await, Frame::End));
        assert_eq!(buffer, b"whole");
        let mut cut_in_length = body(vec![0, 0]);
        assert!(matches!(read_frame(&mut cut_in_length, &mut buffer).await, Frame::End));
    }

    #[tokio::test]
    async fn a_frame_over_the_limit_fails_without_allocating_it() {
        let mut stream = body(u32::MAX.to_be_bytes().to_vec());
        let mut buffer = Vec::new();
        let Frame::Failed(e) = read_frame(&mut stream, &mut buffer).await else {
            panic!("an over-long frame was read");
        };
        assert!(e.to_string().contains("over the limit"), "{e}");
        assert!(buffer.capacity() < MAX_FRAME);
    }
}
