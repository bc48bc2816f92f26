//! What the library logs, shown to a person at a terminal: warnings and errors on stderr as
//! one line each, worded like the command line's own (`copilotd: warning: …`). The language
//! server logs in its own format instead ([`crate::lsp`]).

use std::fmt;

use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::EnvFilter;

/// Shows the library's warnings and errors (or what `COPILOTD_LOG` selects) on stderr.
pub fn to_stderr() {
    let filter = EnvFilter::try_from_env("COPILOTD_LOG").unwrap_or_else(|_| EnvFilter::new("warn"));
    let _ =
        tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).event_format(OneLine).try_init();
}

/// `copilotd: warning: message field=value`.
struct OneLine;

impl<S, N> FormatEvent<S, N> for OneLine
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(&self, ctx: &FmtContext<'_, S, N>, mut writer: Writer<'_>, event: &Event<'_>) -> fmt::Result {
        let level = match *event.metadata().level() {
            Level::ERROR => "error",
            Level::WARN => "warning",
            Level::INFO => "note",
            Level::DEBUG | Level::TRACE => "debug",
        };
        write!(writer, "copilotd: {level}: ")?;
        ctx.field_format().format_fields(writer.by_ref(), event)?;
        writeln!(writer)
    }
}
