//! The receive buffer: packets by count in a ring as long as the flow window, made in blocks
//! as packets land in them, so a packet far ahead costs one block, not the ring up to it.

/// Slots a block holds.
const BLOCK: usize = 256;

/// One packet's place; its bytes stay allocated for the next packet to land there.
#[derive(Debug, Default)]
struct Slot {
    bytes: Vec<u8>,
    filled: bool,
}

/// Packets received and not yet read.
#[derive(Debug)]
pub(crate) struct Ring {
    /// Blocks of [`BLOCK`] slots, empty until a packet lands in them.
    blocks: Vec<Vec<Slot>>,
    capacity: u64,
    /// Bytes of the packets held.
    held: usize,
}

impl Ring {
    pub(crate) fn new(capacity: u64) -> Ring {
        Ring {
            blocks: Vec::new(),
            capacity: capacity.max(1),
            held: 0,
        }
    }

    /// Packets the ring holds at most: counts from the first unread one on, less than this.
    pub(crate) fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Bytes of the packets held.
    pub(crate) fn held(&self) -> usize {
        self.held
    }

    fn locate(&self, count: u64) -> (usize, usize) {
        // Below `capacity`, which came from a `usize`.
        let index = (count % self.capacity) as usize;
        (index / BLOCK, index % BLOCK)
    }

    /// Stores `payload` as packet `count`; false if a packet is there already.
    pub(crate) fn store(&mut self, count: u64, payload: &[u8]) -> bool {
        let (block, at) = self.locate(count);
        if block >= self.blocks.len() {
            self.blocks.resize_with(block + 1, Vec::new);
        }
        let slots = &mut self.blocks[block];
        if slots.is_empty() {
            slots.resize_with(BLOCK, Slot::default);
        }
        let slot = &mut slots[at];
        if slot.filled {
            return false;
        }
        slot.bytes.clear();
        // Exactly: growing by doubling would hold up to twice the payloads.
        slot.bytes.reserve_exact(payload.len());
        slot.bytes.extend_from_slice(payload);
        slot.filled = true;
        self.held += payload.len();
        true
    }

    /// The bytes of packet `count` (empty if it is not held).
    pub(crate) fn get(&self, count: u64) -> &[u8] {
        let (block, at) = self.locate(count);
        self.blocks
            .get(block)
            .and_then(|slots| slots.get(at))
            .filter(|slot| slot.filled)
            .map_or(&[], |slot| slot.bytes.as_slice())
    }

    /// Frees packet `count`'s place (it was read).
    pub(crate) fn release(&mut self, count: u64) {
        let (block, at) = self.locate(count);
        if let Some(slot) = self.blocks.get_mut(block).and_then(|s| s.get_mut(at)) {
            if slot.filled {
                slot.filled = false;
                self.held -= slot.bytes.len();
            }
        }
    }

    /// Heap bytes in use, roughly.
    #[cfg(test)]
    pub(crate) fn footprint(&self) -> usize {
        let slot = std::mem::size_of::<Slot>();
        self.blocks.capacity() * std::mem::size_of::<Vec<Slot>>()
            + self
                .blocks
                .iter()
                .map(|b| b.capacity() * slot + b.iter().map(|s| s.bytes.capacity()).sum::<usize>())
                .sum::<usize>()
    }
}
