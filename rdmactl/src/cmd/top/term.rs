//! The terminal guard: raw mode and the alternate screen for as long as it lives.
//!
//! [`TerminalGuard::enter`] switches the terminal into raw mode and the alternate screen and
//! hides the cursor; dropping the guard (normal exit, `?` on an error, unwinding from a
//! panic) restores all three. [`install_panic_hook`] restores the screen *before* the panic
//! message is printed, so the message lands on the normal screen where it can be read.

use ratatui::backend::CrosstermBackend;
use ratatui::crossterm::cursor::Show;
use ratatui::crossterm::execute;
use ratatui::crossterm::terminal::{
    disable_raw_mode, enable_raw_mode, EnterAlternateScreen, LeaveAlternateScreen,
};
use ratatui::Terminal;
use std::io::{self, Stdout};
use std::sync::atomic::{AtomicBool, Ordering};

/// True while the terminal is in raw mode on the alternate screen. Restoring twice would be
/// harmful: leaving the alternate screen also restores the saved cursor position, so a second
/// `LeaveAlternateScreen` (the guard's Drop after the panic hook) moves the cursor back over
/// the panic message and the shell prompt overwrites it.
static ACTIVE: AtomicBool = AtomicBool::new(false);

/// The terminal type `rdmactl top` draws on.
pub type TopTerminal = Terminal<CrosstermBackend<Stdout>>;

/// Owns the terminal while `top` runs; Drop restores it.
pub struct TerminalGuard {
    /// The ratatui terminal.
    pub terminal: TopTerminal,
}

impl TerminalGuard {
    /// Enter raw mode and the alternate screen. On failure nothing is left changed.
    pub fn enter() -> io::Result<TerminalGuard> {
        enable_raw_mode()?;
        ACTIVE.store(true, Ordering::SeqCst);
        if let Err(e) = execute!(io::stdout(), EnterAlternateScreen) {
            restore();
            return Err(e);
        }
        let terminal = match Terminal::new(CrosstermBackend::new(io::stdout())) {
            Ok(t) => t,
            Err(e) => {
                restore();
                return Err(e);
            }
        };
        let mut guard = TerminalGuard { terminal };
        guard.terminal.hide_cursor()?;
        guard.terminal.clear()?;
        Ok(guard)
    }
}

impl Drop for TerminalGuard {
    fn drop(&mut self) {
        restore();
    }
}

/// Leave the alternate screen, show the cursor, leave raw mode. Only the first call after
/// [`TerminalGuard::enter`] does anything.
pub fn restore() {
    if ACTIVE.swap(false, Ordering::SeqCst) {
        let _ = execute!(io::stdout(), LeaveAlternateScreen, Show);
        let _ = disable_raw_mode();
    }
}

/// Restore the terminal before the previous panic hook prints the message.
pub fn install_panic_hook() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        restore();
        previous(info);
    }));
}
