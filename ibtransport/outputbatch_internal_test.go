package ibtransport

import "testing"

// TestOutputBatchResetDropsPayloads: Reset forgets the payload slices of the
// packets added and of one begun after them, so the batch keeps no memory
// region alive; it leaves untouched slots alone (they are nil already).
func TestOutputBatchResetDropsPayloads(t *testing.T) {
	b := NewOutputBatch(8, 0, 0)
	b.Gather(4)
	mr := make([]byte, 64)
	for i := 0; i < 3; i++ { // two packets added, the third begun
		space := b.pieceSpace()
		space = append(space, mr[i:i+1], mr[i+1:i+2])
		if i < 2 {
			b.Packets = append(b.Packets, OutputPacket{Payload: space})
		}
	}
	b.Reset()
	if b.Len() != 0 {
		t.Fatalf("Len %d after Reset", b.Len())
	}
	for i, p := range b.pieces {
		if p != nil {
			t.Fatalf("piece %d still refers to %d bytes after Reset", i, len(p))
		}
	}
}
