// Package testcerts makes throw-away certificates for tests that run Redis
// over TLS: a certificate authority, and server or client certificates for
// 127.0.0.1 that it signs, valid for a day and written as PEM files.
//
//	ca := testcerts.NewCA(t, dir, "ca")
//	certFile, keyFile := ca.Issue(t, dir, "node", x509.ExtKeyUsageServerAuth)
//	// redis-server --tls-cert-file certFile --tls-key-file keyFile --tls-ca-cert-file ca.File
//	cfg := &tls.Config{RootCAs: ca.Pool()}
//
// Every function fails the test on an error.
package testcerts

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA is a certificate authority made for one test.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
	File string // the CA certificate, PEM encoded
}

// NewCA makes a CA valid for a day and writes its certificate into dir as
// name.crt.
func NewCA(t testing.TB, dir, name string) *CA {
	t.Helper()
	key := newKey(t)
	tmpl := template(t, name)
	tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
	tmpl.KeyUsage |= x509.KeyUsageCertSign
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	check(t, err)
	cert, err := x509.ParseCertificate(der)
	check(t, err)
	ca := &CA{Cert: cert, Key: key, File: filepath.Join(dir, name+".crt")}
	writePEM(t, ca.File, "CERTIFICATE", der)
	return ca
}

// Pool returns a certificate pool that trusts the CA alone.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// Issue signs a certificate for 127.0.0.1, for a server or a client
// (usage), and writes it and its key into dir as name.crt and name.key.
func (ca *CA) Issue(t testing.TB, dir, name string, usage x509.ExtKeyUsage) (certFile, keyFile string) {
	t.Helper()
	key := newKey(t)
	tmpl := template(t, name)
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{usage}
	tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	check(t, err)
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	check(t, err)
	certFile, keyFile = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	writePEM(t, certFile, "CERTIFICATE", der)
	writePEM(t, keyFile, "PRIVATE KEY", kder)
	return certFile, keyFile
}

// ClientConfig returns a TLS configuration that trusts roots and shows
// the client certificate in certFile and keyFile.
func ClientConfig(t testing.TB, roots *x509.CertPool, certFile, keyFile string) *tls.Config {
	t.Helper()
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	check(t, err)
	return &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
}

// template is what every certificate here has: a random serial, the
// name, a day of validity, and digital signatures.
func template(t testing.TB, name string) *x509.Certificate {
	return &x509.Certificate{
		SerialNumber: newSerial(t),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
	}
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	check(t, err)
	return key
}

// newSerial returns a random certificate serial number.
func newSerial(t testing.TB) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	check(t, err)
	return n
}

func writePEM(t testing.TB, file, kind string, der []byte) {
	t.Helper()
	check(t, os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600))
}

func check(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("testcerts: %v", err)
	}
}
