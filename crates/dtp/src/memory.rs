//! A bounded in-memory file for receiving small transfers (listings) without touching storage.

use std::sync::Mutex;

use ferry_storage::{FileHandle, StorageError};

/// Bytes written at offsets into a growable buffer, refused past a limit.
#[derive(Debug)]
pub(crate) struct MemoryFile {
    data: Mutex<Vec<u8>>,
    limit: usize,
}

impl MemoryFile {
    pub(crate) fn new(limit: usize) -> MemoryFile {
        MemoryFile {
            data: Mutex::new(Vec::new()),
            limit,
        }
    }

    pub(crate) fn take(&self) -> Vec<u8> {
        self.data
            .lock()
            .map(|mut d| std::mem::take(&mut *d))
            .unwrap_or_default()
    }
}

fn too_big(limit: usize) -> StorageError {
    StorageError::NoSpace(format!("(in-memory transfer larger than {limit} bytes)"))
}

impl FileHandle for MemoryFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<usize, StorageError> {
        let d = self.data.lock().map_err(|_| too_big(self.limit))?;
        let start = usize::try_from(offset).unwrap_or(usize::MAX).min(d.len());
        let n = buf.len().min(d.len() - start);
        buf[..n].copy_from_slice(&d[start..start + n]);
        Ok(n)
    }

    fn write_all_at(&self, buf: &[u8], offset: u64) -> Result<(), StorageError> {
        let start = usize::try_from(offset).map_err(|_| too_big(self.limit))?;
        let end = start
            .checked_add(buf.len())
            .filter(|e| *e <= self.limit)
            .ok_or_else(|| too_big(self.limit))?;
        let mut d = self.data.lock().map_err(|_| too_big(self.limit))?;
        if d.len() < end {
            d.resize(end, 0);
        }
        d[start..end].copy_from_slice(buf);
        Ok(())
    }

    fn size(&self) -> Result<u64, StorageError> {
        Ok(self.data.lock().map(|d| d.len() as u64).unwrap_or(0))
    }

    fn sync(&self) -> Result<(), StorageError> {
        Ok(())
    }

    fn set_len(&self, len: u64) -> Result<(), StorageError> {
        let len = usize::try_from(len).map_err(|_| too_big(self.limit))?;
        if let Ok(mut d) = self.data.lock() {
            d.resize(len, 0);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_of_order_writes_land_and_the_limit_holds() {
        let m = MemoryFile::new(10);
        m.write_all_at(b"world", 5).unwrap();
        m.write_all_at(b"hello", 0).unwrap();
        assert!(m.write_all_at(b"!", 10).is_err());
        assert_eq!(m.take(), b"helloworld");
    }
}
