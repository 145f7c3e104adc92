module github.com/softrdma/softrdma

go 1.26.0

require (
	github.com/google/gopacket v1.1.19
	github.com/songgao/water v0.0.0-20200317203138-2b4b6d7c09d8
	github.com/spf13/pflag v1.1.0
	golang.org/x/net v0.63.0
	golang.org/x/sys v0.50.0
)
