// The distributed engine hosts (BullMQ on Redis): filled in by the redis work.
export {};
