//! Writing through a wrapper of a TCP stream: the wrappers of the
//! listeners ([`crate::connection`]'s, which watches what is read, and
//! [`crate::listener`]'s, which holds a place in the connection budget)
//! write exactly as the stream does.

/// Implements `tokio::io::AsyncWrite` for `$wrapper` by passing every call
/// to its field `$stream`, a `tokio::net::TcpStream`.
macro_rules! write_through {
    ($wrapper:ty, $stream:ident) => {
        impl tokio::io::AsyncWrite for $wrapper {
            fn poll_write(
                mut self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
                buf: &[u8],
            ) -> std::task::Poll<std::io::Result<usize>> {
                std::pin::Pin::new(&mut self.$stream).poll_write(cx, buf)
            }

            fn poll_write_vectored(
                mut self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
                bufs: &[std::io::IoSlice<'_>],
            ) -> std::task::Poll<std::io::Result<usize>> {
                std::pin::Pin::new(&mut self.$stream).poll_write_vectored(cx, bufs)
            }

            fn is_write_vectored(&self) -> bool {
                self.$stream.is_write_vectored()
            }

            fn poll_flush(
                mut self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                std::pin::Pin::new(&mut self.$stream).poll_flush(cx)
            }

            fn poll_shutdown(
                mut self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                std::pin::Pin::new(&mut self.$stream).poll_shutdown(cx)
            }
        }
    };
}

pub(crate) use write_through;
