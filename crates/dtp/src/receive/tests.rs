use super::chunks;
use ferry_proto::mode_e::BlockHeader;

#[test]
fn a_payload_is_read_in_buffer_sized_pieces_at_their_wire_offsets() {
    let header = BlockHeader::data(1 << 40, 600 << 10);
    let got: Vec<_> = chunks(&header, 256 << 10).collect();
    assert_eq!(
        got,
        [
            (1 << 40, 256 << 10),
            ((1 << 40) + (256 << 10), 256 << 10),
            ((1 << 40) + (512 << 10), 88 << 10),
        ]
    );
    assert_eq!(chunks(&BlockHeader::data(7, 0), 256 << 10).count(), 0);
    assert_eq!(
        chunks(&BlockHeader::data(0, 4), 4).collect::<Vec<_>>(),
        [(0, 4)]
    );
}
