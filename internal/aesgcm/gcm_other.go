//go:build !amd64

package aesgcm

// hasVAES: the fast path is written for amd64 only.
const hasVAES = false

func ctrXOR(k *key, ctr *[16]byte, dst, src *byte, n int) { panic("aesgcm: no fast path") }

func ghashUpdate(k *key, acc *[16]byte, p *byte, n int) { panic("aesgcm: no fast path") }

func sealBulk(k *key, acc, ctr *[16]byte, dst, src *byte, n int) { panic("aesgcm: no fast path") }

func openBulk(k *key, acc, ctr *[16]byte, dst, src *byte, n int) { panic("aesgcm: no fast path") }
