// Package wire is the protocol that redlock Clients speak to the Redis
// nodes, in one place: every Lua script with the command table used to
// name a refused command, the names of the keys and channels a Client
// keeps on a node, the argument builders in the order each script takes
// them, and the readers of each script's reply.
//
// Every process that locks the same keys must agree on all of it byte
// for byte: a Client written in another language implements what this
// package says, and docs/operations.md ("Keys and channels", "The
// protocol") describes the same in prose. The scripts are fixed text:
// nothing is ever interpolated into their source. Most take every key in
// KEYS and every value in ARGV; the queue's scripts write a few constants
// in their source and build a waiter's entry key and the channels
// themselves, all in the lock key's hash slot (keys.go says why).
package wire
