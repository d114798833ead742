package embedded

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/tierstore/tierstore/client"
	"github.com/tierstore/tierstore/master"
	"github.com/tierstore/tierstore/node"
)

// Config configures Embedded: a master, one node and a client in
// one process.
type Config struct {
	// Master configures the in-process master. Its RPC and metrics ports
	// are not used.
	Master master.Config
	// Node configures the node. Listen "" (the default here) serves no
	// socket: the client reaches the node in-process. With EnableOffload
	// and an empty SSDDir, a temporary directory is created and removed by
	// Close.
	Node node.Config
}

// DefaultConfig is master.DefaultConfig with offload on, and
// node.DefaultConfig with 256 MiB of DRAM, offload on, no socket.
func DefaultConfig() Config {
	mc := master.DefaultConfig()
	mc.EnableOffload = true
	nc := node.DefaultConfig()
	nc.Listen = ""
	nc.Memory = 256 << 20
	nc.EnableOffload = true
	return Config{Master: mc, Node: nc}
}

// Embedded is a whole single-process tierstore: Master, Node and Client
// share one address space and talk without sockets; Client has the same API
// as a networked one.
type Embedded struct {
	Master *master.Service
	Node   *node.Node
	Client *client.Client
	// SSDDir is the node's SSD directory ("" without offload).
	SSDDir string
	tmpDir string // created by New, removed by Close
	// removals is the master's removal log in SSDDir/master (nil without
	// an SSD directory or with Config.Master.Removals set).
	removals *master.FileRemovalStore
}

// NewEmbedded starts a master, a node and a client in this process.
func New(ctx context.Context, cfg Config) (_ *Embedded, err error) {
	e := &Embedded{}
	defer func() {
		if err != nil {
			e.Close()
		}
	}()
	if cfg.Node.EnableOffload && cfg.Node.SSDDir == "" {
		if e.tmpDir, err = os.MkdirTemp("", "tierstore-ssd-*"); err != nil {
			return nil, fmt.Errorf("embedded: temporary SSD directory: %w", err)
		}
		cfg.Node.SSDDir = e.tmpDir
	}
	e.SSDDir = cfg.Node.SSDDir
	if err := cfg.Node.Validate(); err != nil {
		return nil, err
	}
	if cfg.Master.Removals == nil && cfg.Node.SSDDir != "" {
		// The removal log beside the SSD it describes: a restart on the
		// same directory keeps what is on SSD and never what was removed.
		if e.removals, err = master.OpenFileRemovalStore(filepath.Join(cfg.Node.SSDDir, "master")); err != nil {
			return nil, fmt.Errorf("embedded master: %w", err)
		}
		cfg.Master.Removals = e.removals
	}
	if e.Master, err = master.New(cfg.Master); err != nil {
		return nil, fmt.Errorf("embedded master: %w", err)
	}
	if e.Node, err = node.Start(ctx, cfg.Node, e.Master); err != nil {
		return nil, fmt.Errorf("embedded node: %w", err)
	}
	if e.Client, err = client.New(ctx, client.Config{Master: e.Master, LocalNode: e.Node, Logger: cfg.Node.Logger}); err != nil {
		return nil, err
	}
	return e, nil
}

// Close stops the client, the node (draining) and the master, and removes
// a temporary SSD directory.
func (e *Embedded) Close() error {
	var errs []error
	if e.Client != nil {
		errs = append(errs, e.Client.Close())
	}
	if e.Node != nil {
		errs = append(errs, e.Node.Close())
	}
	if e.Master != nil {
		errs = append(errs, e.Master.Close())
	}
	if e.removals != nil {
		errs = append(errs, e.removals.Close())
	}
	if e.tmpDir != "" {
		errs = append(errs, os.RemoveAll(e.tmpDir))
	}
	return errors.Join(errs...)
}
