package testcerts

import (
	"crypto/tls"
	"crypto/x509"
	"testing"
)

// handshake runs a TLS handshake on 127.0.0.1 between a server showing
// the server certificate (and asking for a client certificate of ca) and
// client.
func handshake(t *testing.T, ca *CA, serverCert, serverKey string, client *tls.Config) error {
	t.Helper()
	cert, err := tls.LoadX509KeyPair(serverCert, serverKey)
	if err != nil {
		t.Fatal(err)
	}
	srv := &tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: ca.Pool(), ClientAuth: tls.RequireAndVerifyClientCert}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", srv)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			err = c.(*tls.Conn).Handshake()
			c.Close()
		}
		done <- err
	}()
	c, err := tls.Dial("tcp", ln.Addr().String(), client)
	if err == nil {
		c.Close()
	}
	if srvErr := <-done; err == nil {
		err = srvErr
	}
	return err
}

func TestCA_issuesCertificatesForAMutualHandshakeOn127001(t *testing.T) {
	dir := t.TempDir()
	ca := NewCA(t, dir, "ca")
	serverCert, serverKey := ca.Issue(t, dir, "server", x509.ExtKeyUsageServerAuth)
	clientCert, clientKey := ca.Issue(t, dir, "client", x509.ExtKeyUsageClientAuth)

	client := ClientConfig(t, ca.Pool(), clientCert, clientKey)
	if err := handshake(t, ca, serverCert, serverKey, client); err != nil {
		t.Fatalf("handshake with certificates of one CA: %v", err)
	}

	other := NewCA(t, dir, "other")
	untrusting := ClientConfig(t, other.Pool(), clientCert, clientKey)
	if err := handshake(t, ca, serverCert, serverKey, untrusting); err == nil {
		t.Fatal("a client that trusts another CA completed the handshake")
	}
}
