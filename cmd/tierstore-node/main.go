// Command tierstore-node runs a tierstore store node.
package main

func main() {}
