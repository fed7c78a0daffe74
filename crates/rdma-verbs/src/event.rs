//! Asynchronous device events (`ibv_get_async_event`): port up/down, GID changes, CQ
//! overruns, QP fatal errors, typed and acknowledged.
//!
//! The binding's `ibv_async_event` holds the event type as a Rust enum, which would be
//! undefined behaviour for a code newer than the binding; the event is therefore read into a
//! layout-compatible struct whose type field is a plain `u32`.
use crate::codes::AsyncEventType;
use crate::cq::{set_nonblocking, wait_readable};
use crate::device::Context;
use crate::error::VerbsError;
use rdma_mummy_sys::{ibv_ack_async_event, ibv_async_event, ibv_get_async_event, ibv_qp};
use std::os::fd::BorrowedFd;
use std::time::Duration;

/// What an event is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub enum EventElement {
    /// A port (from 1).
    Port(u8),
    /// A QP, by number.
    Qp(u32),
    /// A CQ (no stable id to report).
    Cq,
    /// An SRQ.
    Srq,
    /// A WQ.
    Wq,
    /// The whole device.
    Device,
    /// An event type this layer does not know.
    Unknown,
}

/// One asynchronous event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct AsyncEvent {
    /// Event type.
    pub event_type: AsyncEventType,
    /// What it is about.
    pub element: EventElement,
}

/// Same layout as `struct ibv_async_event`: an 8-byte union, then the type as a C enum.
#[repr(C)]
union RawElement {
    ptr: *mut libc::c_void,
    port_num: libc::c_int,
}

#[repr(C)]
struct RawAsyncEvent {
    element: RawElement,
    event_type: u32,
}

const _: () =
    assert!(std::mem::size_of::<RawAsyncEvent>() == std::mem::size_of::<ibv_async_event>());
const _: () =
    assert!(std::mem::align_of::<RawAsyncEvent>() == std::mem::align_of::<ibv_async_event>());

/// Which union member an event type uses.
fn element_of(t: AsyncEventType, raw: &RawElement) -> EventElement {
    use AsyncEventType as T;
    match t {
        T::CqErr => EventElement::Cq,
        T::QpFatal
        | T::QpReqErr
        | T::QpAccessErr
        | T::CommEst
        | T::SqDrained
        | T::PathMig
        | T::PathMigErr
        | T::QpLastWqeReached => {
            // SAFETY: for QP events the union holds the ibv_qp pointer, valid until the event
            // is acked (ibv_destroy_qp waits for that); qp_num is a plain integer.
            let qp = unsafe { raw.ptr } as *const ibv_qp;
            if qp.is_null() {
                EventElement::Unknown
            } else {
                // SAFETY: non-null, live until ack (see above).
                EventElement::Qp(unsafe { (*qp).qp_num })
            }
        }
        T::SrqErr | T::SrqLimitReached => EventElement::Srq,
        T::WqFatal => EventElement::Wq,
        T::PortActive
        | T::PortErr
        | T::LidChange
        | T::PkeyChange
        | T::SmChange
        | T::ClientReregister
        | T::GidChange
        | T::DeviceSpeedChange => {
            // SAFETY: for port events the union holds the port number as a C int.
            let port = unsafe { raw.port_num };
            u8::try_from(port).map_or(EventElement::Unknown, EventElement::Port)
        }
        T::DeviceFatal => EventElement::Device,
        T::Unknown(_) => EventElement::Unknown,
    }
}

impl Context {
    /// Wait up to `timeout` for the next asynchronous event; `Ok(None)` on timeout.
    /// The event is acknowledged before returning.
    pub fn next_async_event(&self, timeout: Duration) -> Result<Option<AsyncEvent>, VerbsError> {
        // SAFETY: the context is open; its async fd (owned by libibverbs) stays open until the
        // context is closed, which cannot happen while `self` is borrowed.
        let fd = unsafe { BorrowedFd::borrow_raw((*self.raw()).async_fd) };
        set_nonblocking(fd);
        let ready = wait_readable(fd, timeout).map_err(|source| VerbsError::Call {
            op: "poll(async fd)",
            object: self.name().to_string(),
            source,
        })?;
        if !ready {
            return Ok(None);
        }
        let mut raw = RawAsyncEvent {
            element: RawElement {
                ptr: std::ptr::null_mut(),
            },
            event_type: u32::MAX,
        };
        let ptr = (&mut raw as *mut RawAsyncEvent).cast::<ibv_async_event>();
        // SAFETY: `raw` has the size and alignment of ibv_async_event (asserted above); the
        // library writes the union and the type as integers; Rust never reads the binding's
        // enum field.
        let ret = unsafe { ibv_get_async_event(self.raw(), ptr) };
        if ret != 0 {
            let err = std::io::Error::last_os_error();
            if err.kind() == std::io::ErrorKind::WouldBlock {
                return Ok(None);
            }
            return Err(VerbsError::Call {
                op: "ibv_get_async_event",
                object: self.name().to_string(),
                source: err,
            });
        }
        let event_type = AsyncEventType::from_raw(raw.event_type);
        let element = element_of(event_type, &raw.element);
        // SAFETY: acks the event just taken, exactly once, with the struct the library filled.
        unsafe { ibv_ack_async_event(ptr) };
        Ok(Some(AsyncEvent {
            event_type,
            element,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_events_carry_the_port_number() {
        let raw = RawElement { port_num: 1 };
        assert_eq!(
            element_of(AsyncEventType::PortErr, &raw),
            EventElement::Port(1)
        );
        let raw = RawElement { port_num: -3 };
        assert_eq!(
            element_of(AsyncEventType::GidChange, &raw),
            EventElement::Unknown
        );
    }

    #[test]
    fn qp_events_with_a_null_qp_and_unknown_types_do_not_crash() {
        let raw = RawElement {
            ptr: std::ptr::null_mut(),
        };
        assert_eq!(
            element_of(AsyncEventType::QpFatal, &raw),
            EventElement::Unknown
        );
        assert_eq!(
            element_of(AsyncEventType::from_raw(99), &raw),
            EventElement::Unknown
        );
        assert_eq!(element_of(AsyncEventType::CqErr, &raw), EventElement::Cq);
    }
}
